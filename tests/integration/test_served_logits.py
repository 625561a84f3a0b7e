"""Upstream's return_log_probs, return_context_logits, return_generation_logits and
return_perf_metrics through the real tritonserver (ensemble, BLS, tensorrt_llm), and the torch
model's top log probabilities of output and prompt tokens, against transformers on the same
SmolLM2 weights (float32)."""

import queue

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
from transformers import AutoModelForCausalLM, AutoTokenizer
from tritonclient.utils import np_to_triton_dtype

from pipeline.server import launch
from pipeline.stages import deploy
from tests.conftest import served_smollm_spec

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPT = "The capital of France is Paris. The capital of Italy is"
NUM_TOKENS = 6
BLOCK_SIZE = 16  # SMOLLM_ENGINE_OVERRIDES' tokens_per_block
REL = 1e-4
PERF = (
    "kv_cache_alloc_new_blocks",
    "kv_cache_reused_blocks",
    "kv_cache_alloc_total_blocks",
    "arrival_time_ns",
    "first_scheduled_time_ns",
    "first_token_time_ns",
    "last_token_time_ns",
    "acceptance_rate",
    "total_accepted_draft_tokens",
    "total_draft_tokens",
)
SCORES = ("cum_log_probs", "output_log_probs", "context_logits", "generation_logits")
TOP = ("output_top_log_probs", "output_top_log_prob_ids", "prompt_log_probs")
TOP += ("prompt_top_log_probs", "prompt_top_log_prob_ids")


@pytest.fixture(scope="module")
def server(session_workdir, smollm_engine_dir):
    spec = served_smollm_spec(session_workdir, "logits_model_repo")
    deploy.run(spec)
    with launch.local_server(spec.deploy, spec.workdir) as server:
        yield server


@pytest.fixture(scope="module")
def hf(smollm_hf_dir):
    model = AutoModelForCausalLM.from_pretrained(smollm_hf_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(smollm_hf_dir)


def responses(server, model: str, inputs: dict[str, np.ndarray], outputs) -> list[dict]:
    client = grpcclient.InferenceServerClient(server.endpoints.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    tensors = []
    for name, data in inputs.items():
        tensor = grpcclient.InferInput(name, list(data.shape), np_to_triton_dtype(data.dtype))
        tensor.set_data_from_numpy(data)
        tensors.append(tensor)
    try:
        client.async_stream_infer(
            model,
            tensors,
            outputs=[grpcclient.InferRequestedOutput(name) for name in outputs],
            enable_empty_final_response=True,
        )
        got = []
        while True:
            result, error = results.get(timeout=300)
            if error is not None:
                raise RuntimeError(str(error))
            response = result.get_response()
            if response.outputs:
                got.append({o.name: result.as_numpy(o.name) for o in response.outputs})
            if response.parameters["triton_final_response"].bool_param:
                return got
    finally:
        client.stop_stream()
        client.close()


def flag(value) -> np.ndarray:
    return np.array([[value]], bool)


@torch.inference_mode()
def hf_logits(hf, ids: list[int]) -> torch.Tensor:
    return hf[0](torch.tensor([ids])).logits[0].float()


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_logits_log_probs_and_perf_metrics_equal_transformers(server, hf, model):
    inputs = {
        "text_input": np.array([[PROMPT.encode()]], np.object_),
        "max_tokens": np.array([[NUM_TOKENS]], np.int32),
        "return_log_probs": flag(True),
        "return_context_logits": flag(True),
        "return_generation_logits": flag(True),
        "return_perf_metrics": flag(True),
    }
    (out,) = responses(server, model, inputs, ["text_output", *SCORES, *PERF])
    prompt = hf[1](PROMPT).input_ids
    context = out["context_logits"]
    assert context.shape == (1, len(prompt), hf[0].config.vocab_size)
    assert np.allclose(context[0], hf_logits(hf, prompt).numpy(), rtol=REL, atol=1e-4)
    generation = out["generation_logits"]
    num = generation.shape[2]
    assert generation.shape[:2] == (1, 1) and 0 < num <= NUM_TOKENS
    tokens = generation[0, 0].argmax(-1).tolist()  # greedy: each step's likeliest
    assert hf[1].decode(tokens) == out["text_output"].reshape(-1)[0].decode()
    want = hf_logits(hf, prompt + tokens)[len(prompt) - 1 : -1]
    assert np.allclose(generation[0, 0], want.numpy(), rtol=REL, atol=1e-4)
    logprobs = want.log_softmax(-1).gather(1, torch.tensor(tokens)[:, None])[:, 0]
    assert np.allclose(out["output_log_probs"].reshape(-1), logprobs.numpy(), rtol=REL, atol=1e-5)
    assert out["cum_log_probs"].reshape(-1)[0] == pytest.approx(float(logprobs.sum()), abs=1e-3)
    perf = {name: out[name].reshape(-1)[0].item() for name in PERF}
    times = [
        perf[f"{t}_time_ns"] for t in ("arrival", "first_scheduled", "first_token", "last_token")
    ]
    assert times == sorted(times) and times[0] > 0
    blocks = -(-(len(prompt) + num - 1) // BLOCK_SIZE)
    assert perf["kv_cache_alloc_total_blocks"] == perf["kv_cache_alloc_new_blocks"] == blocks
    assert perf["kv_cache_reused_blocks"] == perf["total_draft_tokens"] == 0


def test_top_log_probs_of_output_and_prompt_tokens_streamed(server, hf):
    prompt = hf[1](PROMPT).input_ids
    inputs = {
        "input_ids": np.array([prompt], np.int32),
        "input_lengths": np.array([[len(prompt)]], np.int32),
        "request_output_len": np.array([[NUM_TOKENS]], np.int32),
        "streaming": flag(True),
        "num_top_log_probs": np.array([[3]], np.int32),
        "num_prompt_log_probs": np.array([[2]], np.int32),
    }
    got = responses(server, "tensorrt_llm", inputs, ["output_ids", "output_log_probs", *TOP])
    tokens = [t for r in got for t in r["output_ids"].reshape(-1).tolist()]
    want = hf_logits(hf, prompt + tokens).log_softmax(-1)
    firsts = [r for r in got if "prompt_log_probs" in r]
    assert len(firsts) == 1  # the prompt's come once
    prompt_lp = firsts[0]["prompt_log_probs"].reshape(-1)
    targets = torch.tensor(prompt[1:])[:, None]
    expected = want[: len(prompt) - 1].gather(1, targets)[:, 0].numpy()
    assert prompt_lp[0] == 0 and np.allclose(prompt_lp[1:], expected, rtol=REL, atol=1e-5)
    prompt_ids = firsts[0]["prompt_top_log_prob_ids"][0]
    assert (prompt_ids[1:] == want[: len(prompt) - 1].topk(2).indices.numpy()).all()
    top_ids = np.concatenate(
        [r["output_top_log_prob_ids"][0, 0] for r in got if r["output_ids"].size]
    )
    top_values = np.concatenate(
        [r["output_top_log_probs"][0, 0] for r in got if r["output_ids"].size]
    )
    generated = want[len(prompt) - 1 : -1]
    assert (top_ids == generated.topk(3).indices.numpy()).all()
    assert np.allclose(top_values, generated.topk(3).values.numpy(), rtol=REL, atol=1e-5)
    assert top_ids[:, 0].tolist() == tokens
