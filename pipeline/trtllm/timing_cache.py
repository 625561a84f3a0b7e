"""The TensorRT timing cache as a kept artifact: one per GPU + TensorRT version.

trtllm-build reads it with --input_timing_cache (tactic timings of earlier builds, so kernel
autotuning is not redone) and writes the merged cache with --output_timing_cache. The new cache is
staged next to the kept one and swapped in only after a successful build; a sidecar JSON records
its sha256 so a truncated file is never fed back to TensorRT.
"""

import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.artifacts import sha256_file
from pipeline.trtllm.toolchain import Toolchain

log = logging.getLogger(__name__)

CACHE_FILE = "model.cache"
META_FILE = "timing_cache.json"


def cache_key(toolchain: Toolchain) -> str:
    gpu = re.sub(r"[^a-z0-9]+", "-", toolchain.gpu_name.lower()).strip("-")
    return f"{gpu}-sm{toolchain.gpu_sm}-trt{toolchain.tensorrt_version}"


@dataclass(frozen=True, slots=True)
class TimingCache:
    root: Path
    key: str

    @classmethod
    def for_toolchain(cls, root: Path, toolchain: Toolchain) -> "TimingCache":
        return cls(Path(root).resolve(), cache_key(toolchain))

    @property
    def dir(self) -> Path:
        return self.root / self.key

    @property
    def path(self) -> Path:
        return self.dir / CACHE_FILE

    def input_path(self) -> Path | None:
        """The kept cache if it exists and is intact (a hit), else None (a miss)."""
        meta_path = self.dir / META_FILE
        if not self.path.is_file() or not meta_path.is_file():
            return None
        try:
            expected = json.loads(meta_path.read_text()).get("sha256")
        except (json.JSONDecodeError, AttributeError):
            expected = None
        if expected != sha256_file(self.path):
            log.warning(
                "timing cache %s does not match its %s; rebuilding it from scratch",
                self.path,
                META_FILE,
            )
            return None
        return self.path

    def staging_path(self) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        return self.dir / f".{CACHE_FILE}.tmp-{os.getpid()}"

    def discard(self, staged: Path) -> None:
        staged.unlink(missing_ok=True)

    def commit(self, staged: Path, input_path: Path | None) -> dict:
        """Keep the cache trtllm-build wrote; return what the manifest records about it."""
        record = {
            "key": self.key,
            "path": str(self.path),
            "hit": input_path is not None,
            "input_sha256": sha256_file(input_path) if input_path else None,
        }
        if not staged.is_file():
            log.warning(
                "trtllm-build wrote no timing cache at %s; keeping the previous one", staged
            )
            return {**record, "written": False}
        digest = sha256_file(staged)
        os.replace(staged, self.path)
        meta = {
            "key": self.key,
            "sha256": digest,
            "updated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        tmp_meta = self.dir / f".{META_FILE}.tmp-{os.getpid()}"
        tmp_meta.write_text(json.dumps(meta, indent=2))
        os.replace(tmp_meta, self.dir / META_FILE)
        return {**record, "written": True, "output_sha256": digest}
