"""The engine's LoRA settings as the served tensorrt_llm model's config.pbtxt parameters, and
back. Imported by the python model inside tritonserver: the stdlib only."""

from collections.abc import Mapping
from pathlib import Path


def lora_parameters(spec) -> dict[str, object]:
    """The LoraSpec `spec` as parameters (none when the model serves no adapters); lora_dir is
    relative to the model's dir."""
    if not spec.adapters:
        return {}
    return {
        "lora_dir": "lora",
        "lora_max_rank": spec.max_rank,
        "lora_max_loras": spec.max_loras,
        "lora_target_modules": " ".join(spec.target_modules),
    }


def lora_runtime(params: Mapping[str, str], model_dir: str) -> dict:
    """The engine's lora_* runtime options (none when the model serves no adapters)."""
    if not params.get("lora_dir"):
        return {}
    return {
        "lora_dir": str(Path(model_dir) / params["lora_dir"]),
        "lora_max_rank": int(params["lora_max_rank"]),
        "lora_max_loras": int(params["lora_max_loras"]),
        "lora_target_modules": tuple(params["lora_target_modules"].split()) or None,
    }
