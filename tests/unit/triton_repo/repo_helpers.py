"""A valid repository written by the real writer (torch backend) from a hand-written engine
config.json, and helpers to break one config at a time."""

import json
from pathlib import Path

from pipeline.backends import load_backend
from pipeline.triton_repo import model_config as mcfg
from pipeline.triton_repo.repo_writer import write_repository
from tests.conftest import make_spec

ENGINE_MAX_BATCH_SIZE = 8


def engine_dir(root: Path, max_batch_size: int = ENGINE_MAX_BATCH_SIZE) -> Path:
    """An engine config.json as the build stage writes it (weights are not read by deploy)."""
    path = root / "engine"
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(
        json.dumps(
            {
                "version": "0.1.0",
                "backend": "torch",
                "pretrained_config": {
                    "architecture": "LlamaForCausalLM",
                    "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
                },
                "build_config": {
                    "max_batch_size": max_batch_size,
                    "max_input_len": 192,
                    "max_seq_len": 256,
                    "max_num_tokens": 256,
                    "max_beam_width": 1,
                },
            }
        )
    )
    return path


def write_repo(root: Path, *overrides: str) -> Path:
    """Write (and validate: ConfigError when the overrides make it invalid) a repository."""
    spec = make_spec("deploy", *overrides, workdir=root / "workdir")
    tokenizer = root / "tokenizer"
    tokenizer.mkdir(parents=True, exist_ok=True)
    repo = root / "repo"
    write_repository(load_backend(spec), engine_dir(root), tokenizer, repo, spec.deploy)
    return repo


def read_config(repo: Path, model: str):
    return mcfg.parse((repo / model / "config.pbtxt").read_text())


def write_config(repo: Path, model: str, cfg) -> None:
    (repo / model / "config.pbtxt").write_text(mcfg.render(cfg))
