"""Fixtures of the quantize tests: real SmolLM2 weights cut to 2 decoder layers."""

import shutil
from pathlib import Path

import pytest
import torch

from tests.conftest import make_spec

SMALL = ("quant.calib_size=4", "quant.eval_size=2", "quant.seq_len=128", "quant.batch_size=4")


@pytest.fixture(scope="session")
def two_layer_hf_dir(smollm_hf_dir, tmp_path_factory) -> Path:
    """The fetched SmolLM2 with its first 2 decoder layers (real weights, real tokenizer)."""
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("smollm2-2layer")
    model = AutoModelForCausalLM.from_pretrained(smollm_hf_dir, dtype=torch.float32)
    model.model.layers = model.model.layers[:2]
    model.config.num_hidden_layers = 2
    model.save_pretrained(out)
    for path in smollm_hf_dir.iterdir():
        if path.name.startswith(("tokenizer", "chat_template", "generation_config")):
            shutil.copy(path, out / path.name)
    return out


def two_layer_spec(stage: str, hf_dir: Path, workdir: Path, *overrides: str):
    return make_spec(
        stage,
        "model=hf-local",
        f"model.source={hf_dir}",
        "model.dtype=float16",
        *SMALL,
        *overrides,
        workdir=workdir,
    )


def dtypes_and_shapes(path: Path) -> dict[str, tuple[str, list[int]]]:
    from safetensors import safe_open

    with safe_open(path, "pt") as f:
        return {k: (f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in f.keys()}


@pytest.fixture(scope="session")
def convert_dir(two_layer_hf_dir, tmp_path_factory) -> Path:
    from pipeline.stages import convert

    workdir = tmp_path_factory.mktemp("quant-convert")
    return convert.run(two_layer_spec("convert", two_layer_hf_dir, workdir))
