"""Beam search served by a real tritonserver: the `tensorrt_llm` model, the ensemble and the BLS
return transformers' beams in the tensorrtllm backend's shapes (output_ids [1, beams, tokens],
sequence_length / cum_log_probs [1, beams], output_log_probs [1, beams, tokens], text_output
flat [beams]), streamed or not; a width above the build's is refused by name."""

import numpy as np
import pytest
import torch
from tritonclient.utils import InferenceServerException

from pipeline.server import launch
from pipeline.stages import deploy
from tests.conftest import served_smollm_spec
from tests.integration.test_engine_beam_search import NUM_TOKENS, QUESTIONS, hf_beams
from tests.integration.test_upstream_clients import check_upstream_shapes, e2e_inputs, stream

pytestmark = [pytest.mark.triton, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(session_workdir, smollm_beam_engine_dir):
    spec = served_smollm_spec(session_workdir, "beam_search_repo", "build.max_beam_width=4")
    deploy.run(spec)
    with launch.local_server(spec.deploy, spec.workdir) as running:
        yield running


@pytest.fixture(scope="module")
def hf(smollm_hf_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(smollm_hf_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(smollm_hf_dir)


def chat_ids(tokenizer, question: str) -> list[int]:
    chat = [{"role": "user", "content": question}]
    encoded = tokenizer.apply_chat_template(chat, add_generation_prompt=True)
    return list(encoded if isinstance(encoded, list) else encoded["input_ids"])


@pytest.mark.parametrize(
    ("width", "length_penalty", "early_stopping"), [(2, 0.5, False), (4, 1.0, True)]
)
def test_tensorrt_llm_returns_transformers_beams(server, hf, width, length_penalty, early_stopping):
    model, tokenizer = hf
    eos = (tokenizer.eos_token_id,)
    ids = chat_ids(tokenizer, QUESTIONS[0])
    inputs = {
        "input_ids": np.array([ids], np.int32),
        "input_lengths": np.array([[len(ids)]], np.int32),
        "request_output_len": np.array([[NUM_TOKENS]], np.int32),
        "beam_width": np.array([[width]], np.int32),
        "len_penalty": np.array([[length_penalty]], np.float32),
        "early_stopping": np.array([[early_stopping]], bool),
        "return_log_probs": np.array([[True]], bool),
        "exclude_input_in_output": np.array([[True]], bool),
        "end_id": np.array([[eos[0]]], np.int32),
        "pad_id": np.array([[eos[0]]], np.int32),
    }
    outputs = ["output_ids", "sequence_length", "cum_log_probs", "output_log_probs"]
    (result,) = stream(server, "tensorrt_llm", inputs, outputs)
    check_upstream_shapes("tensorrt_llm", result)  # names, types, order, dims as upstream's
    out_ids, lengths = result.as_numpy("output_ids"), result.as_numpy("sequence_length")
    cum, logprobs = result.as_numpy("cum_log_probs"), result.as_numpy("output_log_probs")
    assert out_ids.shape[:2] == (1, width) and lengths.shape == (1, width)
    assert cum.shape == (1, width) and logprobs.shape[:2] == (1, width)
    beams = [row[:n].tolist() for row, n in zip(out_ids[0], lengths[0], strict=True)]
    assert beams == hf_beams(model, ids, width, length_penalty, early_stopping, eos)
    for row, n, total in zip(logprobs[0], lengths[0], cum[0], strict=True):
        assert np.all(row[:n] < 0) and total <= row[:n].sum() + 1e-3


@pytest.mark.parametrize("model_name", ["ensemble", "tensorrt_llm_bls"])
@pytest.mark.parametrize("streaming", [False, True])
def test_every_beam_text_comes_back_flat(server, hf, model_name, streaming):
    model, tokenizer = hf
    width = 2
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTIONS[1]}], add_generation_prompt=True, tokenize=False
    )
    inputs = {
        "text_input": np.array([[prompt]], object),
        "max_tokens": np.array([[NUM_TOKENS]], np.int32),
        "beam_width": np.array([[width]], np.int32),
        "stream": np.array([[streaming]], bool),
        "exclude_input_in_output": np.array([[True]], bool),
    }
    results = stream(server, model_name, inputs, ["text_output", "sequence_length"])
    assert len(results) == 1  # the beams are settled at the end: one response, streamed or not
    check_upstream_shapes(model_name, results[0], beams=width)
    texts = [t.decode() for t in results[0].as_numpy("text_output")]
    ids = tokenizer.encode(prompt)
    expected = hf_beams(model, ids, width, 1.0, True, (tokenizer.eos_token_id,))
    assert texts == [tokenizer.decode(b, skip_special_tokens=True) for b in expected]
    assert results[0].as_numpy("sequence_length").shape == (1, width)


def test_beam_width_above_the_build_is_refused(server):
    inputs = {
        "text_input": np.array([["Hi"]], object),
        "max_tokens": np.array([[4]], np.int32),
        "beam_width": np.array([[5]], np.int32),
    }
    with pytest.raises(InferenceServerException, match="max_beam_width=4"):
        stream(server, "ensemble", inputs, ["text_output"])


def test_num_return_sequences_returns_the_best_beams(server, hf):
    model, tokenizer = hf
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTIONS[0]}], add_generation_prompt=True, tokenize=False
    )
    inputs = {
        "text_input": np.array([[prompt]], object),
        "max_tokens": np.array([[NUM_TOKENS]], np.int32),
        "beam_width": np.array([[4]], np.int32),
        "num_return_sequences": np.array([[2]], np.int32),
        "exclude_input_in_output": np.array([[True]], bool),
    }
    (result,) = stream(server, "ensemble", inputs, ["text_output", "sequence_length"])
    texts = [t.decode() for t in result.as_numpy("text_output")]
    expected = hf_beams(model, tokenizer.encode(prompt), 4, 1.0, True, (tokenizer.eos_token_id,))
    assert texts == [tokenizer.decode(b, skip_special_tokens=True) for b in expected[:2]]


@pytest.mark.parametrize("model_name", ["ensemble", "tensorrt_llm_bls"])
def test_upstream_end_to_end_clients_request_with_two_beams(server, model_name):
    """end_to_end_grpc_client.py --beam-width 2, as it sends it (its default temperature 1.0, no
    top-k / top-p): two beams, in upstream's names, types, order and dims."""
    inputs = e2e_inputs(["The capital of France is"], False, beam_width=2)
    (result,) = stream(server, model_name, inputs, ["text_output"])
    check_upstream_shapes(model_name, result, beams=2)
    beams = [t.decode() for t in result.as_numpy("text_output")]
    assert len(beams) == 2 and beams[0] != beams[1]
