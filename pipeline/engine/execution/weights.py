"""A rank's weights: its rank<N>.safetensors, or what a weights_loader hook gives."""

import importlib
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from pipeline.errors import ArtifactError, ConfigError


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise ArtifactError(f"{path}: missing; rebuild the engine (build backend=torch)")
    try:
        return load_file(path)
    except (SafetensorError, OSError) as exc:
        raise ArtifactError(
            f"{path}: unreadable ({exc}); rebuild the engine with force=true"
        ) from exc


def load_rank_weights(
    engine_dir: Path, rank: int, device: torch.device, loader: str | None = None
) -> Mapping[str, torch.Tensor]:
    """loader: "module:function" called as function(engine_dir, rank, device); None: the
    engine dir's rank<rank>.safetensors."""
    if loader is None:
        return load_weights(Path(engine_dir) / f"rank{rank}.safetensors")
    module, _, name = loader.partition(":")
    try:
        function = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"engine: weights_loader={loader!r} cannot be imported: {exc}") from exc
    return function(Path(engine_dir), rank, device)
