"""Launch configs chosen by `python -m pipeline tune tune=kernels`, looked up where a kernel
picks its config, before its constant or triton.autotune default.

A config is a flat dict of launch keywords (constexpr tile sizes, num_warps, num_stages) plus
the wrapper's own host-side knobs (e.g. num_splits). The engine installs its engine dir's
kernel_configs.json once it loads (install_engine_configs); the tuner tries a candidate with
`TUNED.trying(...)`. One table a process: the last engine loaded sets it.
"""

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

from pipeline.engine.kernels import toolchain

log = logging.getLogger(__name__)
ENGINE_FILE = "kernel_configs.json"


def shape_key(shape: tuple) -> str:
    return ",".join(map(str, shape))


def dtype_name(x) -> str:
    return str(x.dtype).removeprefix("torch.")


def bucket(n: int) -> int:
    """The power of two at or above n: steps of nearby sizes share a config."""
    return 1 << max(0, n - 1).bit_length()


class TunedConfigs:
    def __init__(self) -> None:
        self._configs: dict[tuple[str, str], dict] = {}
        self._trial: tuple[str, str, dict] | None = None

    def install(self, configs: dict[tuple[str, str], dict]) -> None:
        self._configs = dict(configs)

    def get(self, kernel: str, shape: tuple) -> dict | None:
        key = shape_key(shape)
        if self._trial is not None and self._trial[:2] == (kernel, key):
            return self._trial[2]
        return self._configs.get((kernel, key))

    def __len__(self) -> int:
        return len(self._configs)

    @contextlib.contextmanager
    def trying(self, kernel: str, shape: tuple, config: dict) -> Iterator[None]:
        """`config` for (kernel, shape) inside the block: the tuner's candidate."""
        before, self._trial = self._trial, (kernel, shape_key(shape), config)
        try:
            yield
        finally:
            self._trial = before


TUNED = TunedConfigs()


def lookup(kernel: str, shape: tuple) -> dict | None:
    return TUNED.get(kernel, shape)


def install_engine_configs(engine_dir: Path, device_index: int = 0) -> dict:
    """Install the engine dir's tuned configs (none without the file). Configs tuned in another
    environment are refused as a whole, and a config whose kernel source changed since is
    dropped: the kernels' defaults run instead, with a warning saying why."""
    path = Path(engine_dir) / ENGINE_FILE
    TUNED.install({})
    if not path.is_file():
        return {"status": "none"}
    data = json.loads(path.read_text())
    here = toolchain.environment(device_index)
    if diff := toolchain.differences(data["environment"], here):
        log.warning(
            "engine: %s was tuned in another environment (%s): refused, the kernels' defaults "
            "run; re-run `python -m pipeline tune tune=kernels` and build on this GPU",
            path,
            "; ".join(diff),
        )
        return {"status": "refused", "differences": diff}
    configs, stale = {}, []
    for entry in data["entries"]:
        if entry["source_hash"] != toolchain.source_hash(entry["kernel"]):
            stale.append(f"{entry['kernel']}[{entry['shape']}]")
            continue
        configs[(entry["kernel"], entry["shape"])] = entry["config"]
    if stale:
        log.warning(
            "engine: %d tuned configs are for an older kernel source (%s): their defaults run",
            len(stale),
            ", ".join(stale[:8]),
        )
    TUNED.install(configs)
    log.info("engine: %d tuned kernel configs installed from %s", len(configs), path)
    return {"status": "installed", "num_configs": len(configs), "num_stale": len(stale)}
