"""Penalties, min_tokens and log probabilities on real SmolLM2 against a PyTorch reference: the
transformers model's logits, penalized as TensorRT-LLM defines it (docs/trtllm_reference.md,
sections 9.2 and 9.3), written out token by token here."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from pipeline.engine import LLMEngine, SamplingParams

PROMPT = "My favourite animal is the cat. My favourite"
# greedy SmolLM2 answers this in 6 tokens, then its end token
SHORT_ANSWER = (
    "<|im_start|>user\nWhat is 2+2? Answer with a number.<|im_end|>\n<|im_start|>assistant\n"
)
NUM_TOKENS = 10


# as test_engine_sampling: one step at a time, overlap (tokens pending on the device when the
# next launch samples), and 3 steps a launch (the next steps sample before the host has any)
@pytest.fixture(
    scope="module", params=[(False, 1), (True, 1), (True, 3)], ids=["sync", "overlap", "multistep"]
)
def engine(smollm_engine_dir, request) -> LLMEngine:
    overlap, num_steps = request.param
    return LLMEngine.from_engine_dir(
        smollm_engine_dir, device="cpu", overlap_scheduling=overlap, num_scheduler_steps=num_steps
    )


@pytest.fixture(scope="module")
def plain_greedy(engine):
    prompt = engine.tokenizer.encode(PROMPT)
    return engine.generate([prompt], SamplingParams(max_tokens=NUM_TOKENS, ignore_eos=True))[0]


@pytest.fixture(scope="module")
def model(smollm_hf_dir):
    return AutoModelForCausalLM.from_pretrained(smollm_hf_dir, dtype=torch.float32).eval()


def penalized(logits: torch.Tensor, tokens: list[int], num_prompt: int, p: SamplingParams):
    """TensorRT-LLM's batchApplyPenalty on one row (greedy: no temperature)."""
    logits = logits.clone()
    counted = tokens[min(p.prompt_ignore_length, num_prompt) :]
    for token in set(tokens):
        logit = logits[token]
        logits[token] = logit * p.repetition_penalty if logit < 0 else logit / p.repetition_penalty
    for token in set(counted):
        logits[token] -= p.presence_penalty + p.frequency_penalty * counted.count(token)
    return logits


@torch.inference_mode()
def reference(model, prompt: list[int], p: SamplingParams, eos: tuple[int, ...]):
    """Greedy tokens and their log probabilities, one transformers step at a time."""
    tokens, logprobs = list(prompt), []
    while len(tokens) - len(prompt) < p.max_tokens:
        out = model(torch.tensor([tokens]))
        logits = penalized(out.logits[0, -1].float(), tokens, len(prompt), p)
        if len(tokens) - len(prompt) < p.min_tokens:
            logits[list(eos)] = float("-inf")
        token = int(logits.argmax())
        if token in eos:
            break
        # log probabilities are of the model's own distribution, before penalties (vLLM's)
        logprobs.append(out.logits[0, -1].float().log_softmax(-1)[token].item())
        tokens.append(token)
    return tokens[len(prompt) :], logprobs


@pytest.mark.parametrize(
    "knobs",
    [
        {"repetition_penalty": 1.3},
        {"presence_penalty": 0.6, "frequency_penalty": 0.4},
        {"presence_penalty": 2.0, "frequency_penalty": 1.0, "prompt_ignore_length": 1000},
        {"repetition_penalty": 0.8, "frequency_penalty": -0.3},
    ],
    ids=["repetition", "presence-frequency", "generated-only", "encouraged"],
)
def test_penalized_greedy_tokens_and_log_probs_equal_the_reference(
    engine, model, plain_greedy, knobs
):
    prompt = engine.tokenizer.encode(PROMPT)
    params = SamplingParams(max_tokens=NUM_TOKENS, ignore_eos=True, logprobs=0, **knobs)
    (out,) = engine.generate([prompt], params)
    tokens, logprobs = reference(model, prompt, params, eos=())
    assert out.token_ids == tokens
    assert out.logprobs == pytest.approx(logprobs, abs=2e-3)
    assert plain_greedy.token_ids != tokens  # the penalties changed the answer: it can fail


def test_min_tokens_holds_off_the_end_token(engine, model):
    prompt = engine.tokenizer.encode(SHORT_ANSWER)
    (short,) = engine.generate([prompt], SamplingParams(max_tokens=16))
    assert short.finish_reason == "stop" and len(short.token_ids) < NUM_TOKENS
    params = SamplingParams(max_tokens=16, min_tokens=NUM_TOKENS)
    (out,) = engine.generate([prompt], params)
    assert len(out.token_ids) >= NUM_TOKENS
    assert out.token_ids == reference(model, prompt, params, engine.eos_token_ids)[0]


def test_greedy_log_probs_are_log_softmax_of_transformers_logits(engine, model):
    prompt = engine.tokenizer.encode(PROMPT)
    params = SamplingParams(max_tokens=NUM_TOKENS, ignore_eos=True, logprobs=0)
    plain = SamplingParams(max_tokens=NUM_TOKENS, ignore_eos=True)
    out, beside = engine.generate([prompt, prompt[:4]], [params, plain])
    tokens, logprobs = reference(model, prompt, plain, eos=())
    assert out.token_ids == tokens and len(out.logprobs) == NUM_TOKENS
    assert out.logprobs == pytest.approx(logprobs, abs=2e-3)
    assert all(lp <= 0 for lp in out.logprobs) and beside.logprobs is None


@torch.inference_mode()
def test_sampled_log_probs_are_of_the_models_logits(engine, model):
    prompt = engine.tokenizer.encode(PROMPT)
    params = SamplingParams(
        max_tokens=NUM_TOKENS, ignore_eos=True, logprobs=0, temperature=0.7, top_k=20, seed=11
    )
    (out,) = engine.generate([prompt], params)
    logits = model(torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1 : -1]
    want = logits.log_softmax(-1).gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
    assert out.logprobs == pytest.approx(want.tolist(), abs=2e-3)
