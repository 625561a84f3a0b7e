"""Every model's outputs are upstream's, in upstream's order, with ours only after them: clients
written for the tensorrtllm backend read responses by name and by position (its
benchmark_core_model reads the first output's shape as output_ids'). Upstream: TensorRT-LLM 1.2's
triton_backend/all_models/inflight_batcher_llm/*/config.pbtxt, restated in
docs/trtllm_reference.md, section 9.7."""

from pathlib import Path

import pytest

from pipeline.triton_repo.model_config import type_name
from pipeline.trtllm.triton_io import INPUTS as LLM_INPUTS
from pipeline.trtllm.triton_io import OUTPUTS as LLM_OUTPUTS
from tests.unit.triton_repo.repo_helpers import read_config, write_repo

RESULTS = [
    ("cum_log_probs", "FP32", [-1]),
    ("output_log_probs", "FP32", [-1, -1]),
    ("context_logits", "FP32", [-1, -1]),  # ${logits_datatype}: float32 engines
    ("generation_logits", "FP32", [-1, -1, -1]),
    ("batch_index", "INT32", [1]),
    ("sequence_index", "INT32", [1]),
    ("kv_cache_alloc_new_blocks", "INT32", [1]),
    ("kv_cache_reused_blocks", "INT32", [1]),
    ("kv_cache_alloc_total_blocks", "INT32", [1]),
    ("arrival_time_ns", "INT64", [1]),
    ("first_scheduled_time_ns", "INT64", [1]),
    ("first_token_time_ns", "INT64", [1]),
    ("last_token_time_ns", "INT64", [1]),
    ("acceptance_rate", "FP32", [1]),
    ("total_accepted_draft_tokens", "INT32", [1]),
    ("total_draft_tokens", "INT32", [1]),
    ("num_input_tokens", "INT32", [1]),
    ("num_output_tokens", "INT32", [1]),
]
UPSTREAM = {  # model -> (upstream's outputs in order, ours after them)
    "preprocessing": (
        [
            ("INPUT_ID", "INT32", [-1]),
            ("REQUEST_INPUT_LEN", "INT32", [1]),
            ("DECODER_INPUT_ID", "INT32", [-1]),
            ("REQUEST_DECODER_INPUT_LEN", "INT32", [1]),
            ("BAD_WORDS_IDS", "INT32", [2, -1]),
            ("STOP_WORDS_IDS", "INT32", [2, -1]),
            ("EMBEDDING_BIAS", "FP32", [-1]),
            ("REQUEST_OUTPUT_LEN", "INT32", [-1]),
            ("OUT_END_ID", "INT32", [1]),
            ("OUT_PAD_ID", "INT32", [1]),
            ("OUT_PROMPT_TABLE_EXTRA_IDS", "UINT64", [-1]),
            ("PIXEL_VALUES", "FP16", [-1, -1, -1, -1]),
            ("ASPECT_RATIO_IDS", "INT64", [-1]),
            ("ASPECT_RATIO_MASK", "INT64", [-1, -1]),
            ("CROSS_ATTENTION_MASK", "INT64", [-1, -1, -1]),
            ("IMAGE_SIZES", "INT64", [-1, 2]),
            ("IS_VIDEO_INPUT", "BOOL", [1]),
            ("ATTENTION_MASK", "INT64", [-1]),
            ("IMAGE_GRID_THW", "INT64", [3]),
            ("VISION_INPUT_ID", "INT32", [-1]),
        ],
        [],
    ),
    "postprocessing": (
        [("OUTPUT", "STRING", [-1])],
        [("OUT_SEQUENCE_LENGTH", "INT32", [-1])],
    ),
    "ensemble": ([("text_output", "STRING", [-1]), *RESULTS], [("sequence_length", "INT32", [-1])]),
    "tensorrt_llm_bls": (
        [("text_output", "STRING", [-1]), *RESULTS],
        [("sequence_length", "INT32", [-1])],
    ),
    "tensorrt_llm": (  # the vendored template (section 5.1); the torch model adds its text
        [
            (name, "FP32" if dtype == "LOGITS" else dtype.removeprefix("TYPE_"), list(dims))
            for name, dtype, dims in LLM_OUTPUTS
        ],
        [("text_output", "STRING", [-1])],
    ),
}


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
