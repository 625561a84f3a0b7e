"""Read an HF safetensors directory tensor by tensor, without building the model."""

from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from pipeline.artifacts import read_json_object
from pipeline.errors import ArtifactError


class HFCheckpoint:
    def __init__(self, hf_dir: Path):
        self.hf_dir = Path(hf_dir)
        self.config = read_json_object(self.hf_dir / "config.json", "re-run fetch (force=true)")
        self._index = self._build_index()
        self._handles: dict[Path, object] = {}

    def _build_index(self) -> dict[str, Path]:
        files = sorted(self.hf_dir.glob("*.safetensors"))
        if not files:
            raise ArtifactError(f"{self.hf_dir}: no *.safetensors files; re-run fetch (force=true)")
        index = {}
        for path in files:
            try:
                with safe_open(path, "pt") as f:
                    index.update(dict.fromkeys(f.keys(), path))
            except (SafetensorError, OSError) as exc:
                raise ArtifactError(
                    f"{path}: corrupted safetensors file ({exc}); re-run fetch with force=true"
                ) from exc
        return index

    def has(self, name: str) -> bool:
        return name in self._index

    def get(self, name: str) -> torch.Tensor:
        path = self._index.get(name)
        if path is None:
            raise ArtifactError(
                f"{self.hf_dir}: tensor {name!r} is missing from the checkpoint; "
                f"the download is incomplete or the architecture is mislabelled"
            )
        if path not in self._handles:
            self._handles[path] = safe_open(path, "pt")
        try:
            return self._handles[path].get_tensor(name)
        except (SafetensorError, OSError) as exc:
            raise ArtifactError(
                f"{path}: cannot read tensor {name!r} ({exc}); re-run fetch with force=true"
            ) from exc
