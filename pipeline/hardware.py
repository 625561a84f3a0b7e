"""Target GPU -> compute capability (SM), for precision checks made before any work."""

from pipeline.errors import ConfigError

# name -> SM as an int (89 = 8.9)
GPU_SM = {
    "v100": 70,
    "t4": 75,
    "a10": 86,
    "a10g": 86,
    "a30": 80,
    "a40": 86,
    "a100": 80,
    "a6000": 86,
    "l4": 89,
    "l40": 89,
    "l40s": 89,
    "rtx4090": 89,
    "h100": 90,
    "h200": 90,
    "gh200": 90,
    "b100": 100,
    "b200": 100,
    "gb200": 100,
    "b300": 103,
    "rtx5090": 120,
    "rtxpro6000": 120,
}


def target_sm(hardware: str) -> int | None:
    """SM of the target GPU; None for `cpu`, or for `auto` on a machine without CUDA."""
    name = hardware.lower().replace("-", "").replace("_", "")
    if name == "cpu":
        return None
    if name == "auto":
        import torch

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
        return major * 10 + minor
    if name.startswith("sm") and name[2:].isdigit():
        return int(name[2:])
    if name not in GPU_SM:
        raise ConfigError(
            f"hardware={hardware!r} is unknown; use auto, cpu, sm<NN> or one of "
            f"{', '.join(sorted(GPU_SM))}"
        )
    return GPU_SM[name]
