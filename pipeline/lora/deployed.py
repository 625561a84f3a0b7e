"""Adapters into a repository: each checked against the engine's base model (every module,
shape and rank, as the engine will load it), then copied beside the tensorrt_llm model; for the
tensorrtllm backend also as the lora_weights / lora_config tensors a client sends with an
adapter's first request (trtllm_tensors.py)."""

import shutil
from pathlib import Path

import torch

from pipeline.engine.engine_config import ModelConfig
from pipeline.engine.lora.weights import load_adapter
from pipeline.engine.parallel.mapping import SINGLE_RANK
from pipeline.engine_json import EngineJson
from pipeline.errors import ConfigError
from pipeline.lora.adapters import (
    REPOSITORY_DIR,
    TARGET_MODULES,
    check_target_modules,
    read_adapter,
    task_id,
)
from pipeline.lora.fetch import FILES
from pipeline.lora.trtllm_tensors import write_lora_tensors
from pipeline.specs.lora import LoraSpec


def target_modules(spec: LoraSpec) -> tuple[str, ...]:
    return check_target_modules(spec.target_modules or TARGET_MODULES, "lora.target_modules")


def _base_model(engine_dir: Path) -> ModelConfig:
    engine = EngineJson.read(engine_dir, "build it first")
    return ModelConfig.from_pretrained_config(engine.pretrained, f"engine {engine_dir}")


def check_adapters(adapters: dict[str, Path], engine_dir: Path, spec: LoraSpec) -> None:
    """Every adapter against the base model of engine_dir; ConfigError naming the adapter."""
    cfg = _base_model(engine_dir)
    targets = target_modules(spec)
    ids: dict[int, str] = {}
    for name, path in adapters.items():
        load_adapter(
            read_adapter(path, name, spec.max_rank), cfg, SINGLE_RANK, torch.float32, targets
        )
        other = ids.setdefault(task_id(name), name)
        if other != name:
            raise ConfigError(
                f"lora.adapters: {other!r} and {name!r} share lora_task_id {task_id(name)}; "
                f"rename one"
            )


def copy_adapters(adapters: dict[str, Path], llm_dir: Path) -> None:
    """Into the tensorrt_llm model's dir, where its engine reads them (and re-reads the dir for
    an adapter it does not know yet)."""
    for name, path in adapters.items():
        (llm_dir / REPOSITORY_DIR / name).mkdir(parents=True)
        for file in FILES:
            shutil.copy2(path / file, llm_dir / REPOSITORY_DIR / name / file)


def write_trtllm_tensors(
    adapters: dict[str, Path], engine_dir: Path, spec: LoraSpec, llm_dir: Path
) -> None:
    """Each copied adapter's model.lora_weights.npy and model.lora_config.npy, beside its files
    (copy_adapters first)."""
    cfg, targets = _base_model(engine_dir), target_modules(spec)
    for name, path in adapters.items():
        info = read_adapter(path, name, spec.max_rank)
        write_lora_tensors(info, cfg, targets, llm_dir / REPOSITORY_DIR / name)
