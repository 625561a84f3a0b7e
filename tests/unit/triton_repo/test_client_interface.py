"""The ensemble and the BLS declare upstream's client interface (TensorRT-LLM 1.2 templates,
docs/trtllm_reference.md, section 9.1), and every input reaches a model that uses or refuses
it, for both backends."""

from pathlib import Path

import pytest

from pipeline.backends import load_backend
from pipeline.triton_repo.model_config import type_name
from pipeline.triton_repo.repo_writer import write_repository
from pipeline.trtllm.triton_io import INPUTS as TRTLLM_INPUTS
from tests.conftest import REPO, make_spec
from tests.unit.triton_repo.repo_helpers import read_config, write_repo

# upstream ensemble/config.pbtxt: name -> (data type, dims); "*" marks allow_ragged_batch
UPSTREAM_INPUTS = {
    "text_input": ("STRING", [1]),
    "decoder_text_input": ("STRING", [1]),
    "max_tokens": ("INT32", [1]),
    "num_return_sequences": ("INT32", [1]),
    "bad_words": ("STRING", [-1]),
    "stop_words": ("STRING", [-1]),
    "exclude_input_in_output": ("BOOL", [1]),
    "end_id": ("INT32", [1]),
    "pad_id": ("INT32", [1]),
    "top_k": ("INT32", [1]),
    "top_p": ("FP32", [1]),
    "temperature": ("FP32", [1]),
    "length_penalty": ("FP32", [1]),
    "repetition_penalty": ("FP32", [1]),
    "min_tokens": ("INT32", [1]),
    "presence_penalty": ("FP32", [1]),
    "frequency_penalty": ("FP32", [1]),
    "seed": ("UINT64", [1]),
    "return_log_probs": ("BOOL", [1]),
    "return_context_logits": ("BOOL", [1]),
    "return_generation_logits": ("BOOL", [1]),
    "return_perf_metrics": ("BOOL", [1]),
    "return_num_input_tokens": ("BOOL", [1]),
    "return_num_output_tokens": ("BOOL", [1]),
    "beam_width": ("INT32", [1]),
    "stream": ("BOOL", [1]),
    "prompt_embedding_table": ("FP16", [-1, -1]),
    "prompt_table_extra_id": ("UINT64", [1]),
    "prompt_vocab_size": ("INT32", [1]),
    "embedding_bias_words": ("STRING", [-1]),
    "embedding_bias_weights": ("FP32", [-1]),
    "lora_task_id": ("UINT64", [1]),
    "lora_weights": ("FP16", [-1, -1, "*"]),
    "lora_config": ("INT32", [-1, 3, "*"]),
    "guided_decoding_guide_type": ("STRING", [1, "*"]),
    "guided_decoding_guide": ("STRING", [1, "*"]),
}
UPSTREAM_OUTPUTS = {
    "text_output": ("STRING", [-1]),
    "cum_log_probs": ("FP32", [-1]),
    "output_log_probs": ("FP32", [-1, -1]),
    "context_logits": ("FP32", [-1, -1]),  # ${logits_datatype}: float32 engines
    "generation_logits": ("FP32", [-1, -1, -1]),
    **{name: ("INT32", [1]) for name in ("batch_index", "sequence_index")},
    **{
        f"kv_cache_{name}_blocks": ("INT32", [1]) for name in ("alloc_new", "reused", "alloc_total")
    },
    **{
        f"{name}_time_ns": ("INT64", [1])
        for name in ("arrival", "first_scheduled", "first_token", "last_token")
    },
    "acceptance_rate": ("FP32", [1]),
    "total_accepted_draft_tokens": ("INT32", [1]),
    "total_draft_tokens": ("INT32", [1]),
    "num_input_tokens": ("INT32", [1]),
    "num_output_tokens": ("INT32", [1]),
}
# upstream tensorrt_llm_bls/config.pbtxt: its own inputs, and the ensemble's it reshapes
BLS_OWN = {
    "image_input": ("FP16", [-1, 3, -1, -1]),
    "image_bytes_input": ("UINT8", [-1, -1, -1, -1]),
    "image_url_input": ("STRING", [1]),
    "video_bytes_input": ("UINT8", [-1, -1, -1, -1]),
    "num_draft_tokens": ("INT32", [1]),
    "use_draft_logits": ("BOOL", [1]),
}
BLS_RESHAPED = {
    "return_log_probs",
    "return_context_logits",
    "return_generation_logits",
    "num_return_sequences",
    "lora_task_id",
    "return_perf_metrics",
    "return_num_input_tokens",
    "return_num_output_tokens",
    "use_draft_logits",
}
# ours beside upstream's outputs: the tokens behind each response's text
OURS = {"sequence_length": ("INT32", [-1])}


def declared(tensors, ragged: bool = True) -> dict:
    """name -> (data type, dims, "*" when ragged) of ModelInput / ModelOutput protobufs."""
    return {
        t.name: (
            type_name(t.data_type).removeprefix("TYPE_"),
            [*t.dims, *(["*"] if ragged and getattr(t, "allow_ragged_batch", False) else [])],
        )
        for t in tensors
    }


@pytest.fixture(scope="module")
def torch_repo(tmp_path_factory) -> Path:
    return write_repo(tmp_path_factory.mktemp("torch"))


@pytest.fixture(scope="module")
def trtllm_repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("trtllm")
    spec = make_spec("deploy", "backend=trtllm", "hardware=h100", workdir=root)
    (root / "tokenizer").mkdir()
    engine = REPO / "tests" / "fixtures" / "trtllm_engine"
    write_repository(load_backend(spec), engine, root / "tokenizer", root / "repo", spec.deploy)
    return root / "repo"


@pytest.mark.parametrize("repo", ["torch_repo", "trtllm_repo"])
def test_the_ensemble_declares_upstreams_interface(repo, request):
    ensemble = read_config(request.getfixturevalue(repo), "ensemble")
    assert declared(ensemble.input) == UPSTREAM_INPUTS
    assert declared(ensemble.output) == {**UPSTREAM_OUTPUTS, **OURS}


def test_the_bls_declares_upstreams_interface(torch_repo):
    bls = read_config(torch_repo, "tensorrt_llm_bls")
    inputs = declared(bls.input, ragged=False)
    assert inputs == {
        **{
            name: (dtype, [d for d in dims if d != "*"])
            for name, (dtype, dims) in UPSTREAM_INPUTS.items()
        },
        **BLS_OWN,
    }
    assert {t.name for t in bls.input if t.HasField("reshape")} == BLS_RESHAPED
    assert {t.name for t in bls.input if t.allow_ragged_batch} == {"lora_weights", "lora_config"}
    assert declared(bls.output) == {**UPSTREAM_OUTPUTS, **OURS}


def consumed(ensemble) -> set[str]:
    return {name for step in ensemble.ensemble_scheduling.step for name in step.input_map.values()}


@pytest.mark.parametrize("repo", ["torch_repo", "trtllm_repo"])
def test_every_client_input_reaches_a_model(repo, request):
    """An input the ensemble declares but maps nowhere would be dropped without a word."""
    ensemble = read_config(request.getfixturevalue(repo), "ensemble")
    assert set(UPSTREAM_INPUTS) <= consumed(ensemble)


def test_the_tensorrtllm_backend_gets_upstreams_names(trtllm_repo):
    steps = read_config(trtllm_repo, "ensemble").ensemble_scheduling.step
    llm = next(step for step in steps if step.model_name == "tensorrt_llm")
    assert set(llm.input_map) <= {name for name, *_ in TRTLLM_INPUTS}
    renamed = {"runtime_top_k": "top_k", "runtime_top_p": "top_p", "len_penalty": "length_penalty"}
    for model_input, client_input in renamed.items():
        assert llm.input_map[model_input] == client_input
    assert llm.input_map["streaming"] == "stream"
    same = set(UPSTREAM_INPUTS) & set(llm.input_map) - {"end_id", "pad_id"}
    assert {name for name in same if llm.input_map[name] != name} == set()
    assert {"embedding_bias", "prompt_table_extra_ids", "lora_weights", "beam_width"} <= set(
        llm.input_map
    )
