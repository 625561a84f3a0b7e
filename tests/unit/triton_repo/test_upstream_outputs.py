"""Every model's outputs are upstream's, in upstream's order, with ours only after them: clients
written for the tensorrtllm backend read responses by name and by position (its
benchmark_core_model reads the first output's shape as output_ids'). Upstream: TensorRT-LLM 1.2's
triton_backend/all_models/inflight_batcher_llm/*/config.pbtxt (upstream_configs.py, restated in
docs/trtllm_reference.md, section 9.7)."""

from pathlib import Path

import pytest

from pipeline.triton_repo.model_config import type_name
from pipeline.trtllm.triton_io import INPUTS as LLM_INPUTS
from tests.unit.triton_repo.repo_helpers import read_config, write_repo
from tests.unit.triton_repo.upstream_configs import UPSTREAM


def outputs(repo: Path, model: str) -> list[tuple[str, str, list[int]]]:
    tensors = read_config(repo, model).output
    return [(t.name, type_name(t.data_type).removeprefix("TYPE_"), list(t.dims)) for t in tensors]


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, Path]:
    return {
        "default": write_repo(tmp_path_factory.mktemp("default")),
        "upstream_steps": write_repo(
            tmp_path_factory.mktemp("steps"),
            "deploy.torch.tokenize=false",
            "deploy.torch.detokenize=false",
        ),
        "unary": write_repo(tmp_path_factory.mktemp("unary"), "deploy.decoupled_mode=false"),
    }


@pytest.mark.parametrize("repo", ["default", "upstream_steps", "unary"])
@pytest.mark.parametrize("model", list(UPSTREAM))
def test_outputs_are_upstreams_in_its_order_then_ours(repos, repo, model):
    upstream, ours = UPSTREAM[model]
    assert outputs(repos[repo], model) == [*upstream, *ours]


def test_the_torch_llm_declares_every_upstream_input_in_its_order(repos):
    declared = [t.name for t in read_config(repos["default"], "tensorrt_llm").input]
    assert declared[: len(LLM_INPUTS)] == [name for name, *_ in LLM_INPUTS]
