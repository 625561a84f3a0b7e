"""Tuned kernel launch configs kept across runs, like TensorRT's timing cache.

One JSON file holds one environment (GPU name, driver, CUDA, Triton, torch versions): opening it
in another environment is refused, naming what differs. Each entry is keyed by kernel and shape
class and records the kernel's source hash: after an edit to a kernel's source, only that
kernel's entries miss (and are replaced when it is tuned again). Saved atomically: a temp file
in the same directory, then a rename, so a reader sees the old file or the new one, whole.
"""

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.engine.kernels import toolchain
from pipeline.errors import ConfigError

FORMAT = 1


@dataclass(frozen=True, slots=True)
class CacheEntry:
    kernel: str
    shape: str
    source_hash: str
    config: dict
    default_config: dict
    default_ms: float
    tuned_ms: float
    strategy: str
    num_trials: int


class TuningCacheMismatch(ConfigError):
    """The cache file was recorded in another environment."""


class TuningCache:
    def __init__(self, path: Path, environment: dict, entries: dict[tuple[str, str], CacheEntry]):
        self.path = Path(path)
        self.environment = dict(environment)
        self.entries = entries

    @classmethod
    def open(cls, path: Path, environment: dict, replace: bool = False) -> "TuningCache":
        """The cache at `path` (empty when there is none). replace: start a new one over a file
        from another environment instead of refusing it."""
        path = Path(path)
        if not path.is_file():
            return cls(path, environment, {})
        try:
            data = json.loads(path.read_text())
            recorded = data["environment"]
            entries = [CacheEntry(**e) for e in data["entries"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"tune: {path} is not a kernel tuning cache ({exc}); delete it or set "
                f"tune.kernels.cache_path to another file"
            ) from exc
        if diff := toolchain.differences(recorded, environment):
            if replace:
                return cls(path, environment, {})
            raise TuningCacheMismatch(
                f"tune: {path} was recorded in another environment ({'; '.join(diff)}): its "
                f"timings do not hold here; set tune.kernels.cache_path to a file for this GPU "
                f"and toolchain, or force=true to start this one anew"
            )
        return cls(path, environment, {(e.kernel, e.shape): e for e in entries})

    def get(self, kernel: str, shape: str, source_hash: str) -> CacheEntry | None:
        """The entry for (kernel, shape) if it was tuned on the kernel's current source."""
        entry = self.entries.get((kernel, shape))
        return entry if entry is not None and entry.source_hash == source_hash else None

    def put(self, entry: CacheEntry) -> None:
        self.entries[(entry.kernel, entry.shape)] = entry

    def save(self) -> None:
        data = {
            "format": FORMAT,
            "environment": self.environment,
            "entries": [asdict(e) for _, e in sorted(self.entries.items())],
        }
        write_atomically(self.path, json.dumps(data, indent=1) + "\n")


def write_atomically(path: Path, text: str) -> None:
    """`text` at `path`, or the old file untouched if anything fails on the way."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
