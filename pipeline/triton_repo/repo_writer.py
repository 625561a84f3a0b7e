"""Write the five-model repository into a fresh dir, validate it, then publish it atomically."""

import json
import logging
import os
import shutil
from pathlib import Path

from pipeline.errors import ConfigError, StageError
from pipeline.specs.deploy import DeploySpec
from pipeline.triton_models import SERVED
from pipeline.triton_repo import interface as io
from pipeline.triton_repo import model_config as mcfg
from pipeline.triton_repo import shared_models
from pipeline.triton_repo.engine_info import EngineInfo, triton_max_batch_size
from pipeline.triton_repo.validate import check_repository

log = logging.getLogger(__name__)

SOURCES = SERVED / "python_models"
# beside every python model that checks request values: the stub imports it from the model's
# version dir, so the models need no other part of this package (the tensorrtllm backend's image)
INPUT_CHECKS = SERVED / "input_checks.py"
BLS_NAMES = SERVED / "bls_names.py"  # the same, for the BLS's tables
DRAFT_TARGET = SERVED / "draft_target.py"  # the same, for the BLS's draft-target rounds
MARKER = ".pipeline_repository.json"  # marks a dir this module may replace
KEPT_FILES = ("README.md",)


def _write_model(repo: Path, cfg, source: str | None) -> None:
    version_dir = repo / cfg.name / "1"
    version_dir.mkdir(parents=True)
    if source is None:
        (version_dir / ".gitkeep").write_text("")  # Triton needs the version dir to exist
    else:
        shutil.copyfile(SOURCES / source, version_dir / "model.py")
        for module in (INPUT_CHECKS, BLS_NAMES, DRAFT_TARGET):
            shutil.copyfile(module, version_dir / module.name)
    (repo / cfg.name / "config.pbtxt").write_text(mcfg.render(cfg))


def write_repository(
    backend, engine_dir: Path, tokenizer_dir: Path, repo: Path, deploy: DeploySpec
) -> dict:
    """Write and validate everything under `repo` (a new dir); raise ConfigError when invalid."""
    engine = EngineInfo.read(engine_dir)
    max_batch_size = triton_max_batch_size(deploy, engine)
    tokenizer_dir = Path(tokenizer_dir).resolve()
    repo.mkdir(parents=True)
    _write_model(
        repo, shared_models.preprocessing(deploy, max_batch_size, tokenizer_dir), "preprocessing.py"
    )
    _write_model(
        repo,
        shared_models.postprocessing(deploy, max_batch_size, tokenizer_dir),
        "postprocessing.py",
    )
    # the tensorrtllm backend cannot (de)tokenize: its ensemble keeps pre- and postprocessing
    is_llm_tokenizing = backend.name == "torch" and deploy.torch.tokenize
    is_llm_detokenizing = backend.name == "torch" and deploy.torch.detokenize
    # the logits outputs' type: the engine's (the torch engine's are float32); a type the
    # tensorrtllm backend cannot serve is refused, by name, when its model is written
    logits_dtype = engine.logits_dtype if backend.name == "trtllm" else "float32"
    logits_type = io.LOGITS_TYPES.get(logits_dtype, io.LOGITS_TYPES["float32"])
    _write_model(
        repo,
        shared_models.ensemble(max_batch_size, is_llm_tokenizing, is_llm_detokenizing, logits_type),
        None,
    )
    llm_dir = repo / "tensorrt_llm"
    text = backend.triton_llm_model(Path(engine_dir).resolve(), tokenizer_dir, llm_dir)
    written = llm_dir / "config.pbtxt"
    if not written.is_file() or written.read_text() != text:
        raise StageError(
            f"deploy: backend {backend.name!r} returned a tensorrt_llm config that "
            f"differs from {written}; its triton_llm_model must write what it "
            f"returns"
        )
    draft = backend.triton_draft_model(Path(engine_dir).resolve(), repo)
    _write_model(
        repo,
        shared_models.bls(deploy, max_batch_size, is_llm_detokenizing, logits_type, draft),
        "tensorrt_llm_bls.py",
    )
    check_repository(repo, engine.max_batch_size, backend.name)
    return {
        "triton_max_batch_size": max_batch_size,
        "engine_max_batch_size": engine.max_batch_size,
        "decoupled_mode": deploy.decoupled_mode,
        "world_size": engine.world_size,
        "is_llm_tokenizing": is_llm_tokenizing,
        "is_llm_detokenizing": is_llm_detokenizing,
        "draft_model": draft[0] if draft else None,
    }


def publish(source: Path, repo_dir: Path, marker: dict) -> None:
    """Replace repo_dir by a copy of source in one rename; README.md in repo_dir is kept.

    Refuses a non-empty repo_dir that this function did not write (no marker), so a mistyped
    deploy.repo_dir never deletes someone's files.
    """
    repo_dir = Path(repo_dir)
    if repo_dir.exists():
        if not repo_dir.is_dir():
            raise ConfigError(
                f"deploy: deploy.repo_dir={str(repo_dir)!r} exists and is not a "
                f"directory; point deploy.repo_dir elsewhere"
            )
        foreign = [p.name for p in repo_dir.iterdir() if p.name not in (MARKER, *KEPT_FILES)]
        if foreign and not (repo_dir / MARKER).is_file():
            raise ConfigError(
                f"deploy: deploy.repo_dir={str(repo_dir)!r} holds files the "
                f"pipeline did not write ({', '.join(sorted(foreign)[:5])}); "
                f"empty it or set deploy.repo_dir to a new directory"
            )
    repo_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = repo_dir.parent / f".{repo_dir.name}.tmp-{os.getpid()}"
    old = repo_dir.parent / f".{repo_dir.name}.old-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp)
    for name in KEPT_FILES:
        if (repo_dir / name).is_file():
            shutil.copy2(repo_dir / name, tmp / name)
    (tmp / MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True))
    if repo_dir.exists():
        os.rename(repo_dir, old)
    os.rename(tmp, repo_dir)
    shutil.rmtree(old, ignore_errors=True)
    log.info("deploy: published %s -> %s", source, repo_dir)


def published_marker(repo_dir: Path) -> dict | None:
    path = Path(repo_dir) / MARKER
    return json.loads(path.read_text()) if path.is_file() else None
