"""Speculative decoding on a small random Llama. Sampling keeps the target's distribution:
10,000 seeded requests, whose second and third tokens come from verify steps (drafts accepted
with the target's probability of them, a rejected position resampled), are drawn as often as
the target's own distribution says (chi-square, alpha = 0.001; fixed seeds: deterministic).
Tensor- and pipeline-parallel engines verify drafts as one rank does."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from tokenizers import Tokenizer, models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from pipeline.backends.torch_backend import build_engine_dir
from pipeline.checkpoint.hf_to_trtllm import convert
from pipeline.engine import LLMEngine, SamplingParams
from pipeline.specs.build import BuildSpec

VOCAB = 48
TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    initializer_range=0.3,  # peaked enough that a greedy draft is often the target's draw
    max_position_embeddings=64,
)
BUILD = BuildSpec(
    max_batch_size=64, max_input_len=16, max_seq_len=32, max_num_tokens=256, tokens_per_block=8
)
PROMPT = [5, 17, 3, 9, 22, 40, 11]
NUM_SAMPLES = 10_000
ALPHA = 0.001


def engine_dir(root, tp: int, pp: int):
    ckpt, out = root / f"ckpt-tp{tp}-pp{pp}", root / f"engine-tp{tp}-pp{pp}"
    ckpt.mkdir()
    out.mkdir()
    convert(root / "hf", ckpt, "float32", tp, pp)
    build_engine_dir(BUILD, ckpt, root / "hf", out)
    return out


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_spec")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**TINY)).eval().save_pretrained(root / "hf")
    tokenizer = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, "t0"))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="t1").save_pretrained(root / "hf")
    return root


@pytest.fixture(scope="module")
def tiny_engine_dir(tiny_root):
    return engine_dir(tiny_root, 1, 1)


def target_marginals(engine: LLMEngine, prompt: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The target's exact distributions of the 2nd and 3rd generated tokens (temperature 1)."""
    probs = lambda ids: engine.prompt_logits(ids)[:, -1].double().softmax(-1)  # noqa: E731
    p1 = probs([prompt])[0]  # [V]
    p2 = probs([[*prompt, t] for t in range(VOCAB)])  # [V(t1), V]
    pairs = [[*prompt, t1, t2] for t1 in range(VOCAB) for t2 in range(VOCAB)]
    p3 = probs(pairs).view(VOCAB, VOCAB, VOCAB)  # [t1, t2, t3]
    joint12 = p1[:, None] * p2
    return joint12.sum(0).numpy(), (joint12[:, :, None] * p3).sum((0, 1)).numpy()


def chi_square_p(samples: list[int], expected: np.ndarray) -> float:
    """p-value of the counts against NUM_SAMPLES * expected; tokens expected fewer than 5
    times are pooled into one bin."""
    counts = np.bincount(samples, minlength=VOCAB).astype(float)
    want = expected * len(samples)
    big = want >= 5
    observed = np.append(counts[big], counts[~big].sum())
    wanted = np.append(want[big], want[~big].sum())
    if wanted[-1] < 5:  # too little to pool: fold it into the smallest bin
        observed, wanted = observed[:-1], wanted[:-1]
        observed[-1] += counts[~big].sum()
        wanted[-1] += want[~big].sum()
    return chisquare(observed, wanted * observed.sum() / wanted.sum()).pvalue


@pytest.mark.parametrize("method", ["draft_model", "prompt_lookup"])
def test_sampled_tokens_follow_the_target_distribution(tiny_engine_dir, method):
    speculation = {"method": method, "num_draft_tokens": 2, "adaptive": False, "max_batch_size": 0}
    if method == "draft_model":  # the target itself, greedy: its argmax as the draft
        speculation["draft_engine_dir"] = str(tiny_engine_dir)
    engine = LLMEngine.from_engine_dir(tiny_engine_dir, device="cpu", speculation=speculation)
    prompt = PROMPT
    if method == "prompt_lookup":  # the prompt holds its likely continuation after its tail
        (out,) = engine.generate([PROMPT], SamplingParams(max_tokens=6, ignore_eos=True))
        prompt = [*PROMPT[-2:], *out.token_ids, *PROMPT]
    params = [
        SamplingParams(max_tokens=3, temperature=1.0, ignore_eos=True, seed=seed)
        for seed in range(NUM_SAMPLES)
    ]
    outputs = engine.generate([prompt] * NUM_SAMPLES, params)
    stats = engine.stats()
    # both branches ran many times: drafts kept, and rejected positions resampled
    assert 0.1 < stats["spec_acceptance_rate"] < 0.9
    assert stats["spec_num_drafted_tokens"] > NUM_SAMPLES // 10
    second, third = target_marginals(engine, prompt)
    assert chi_square_p([o.token_ids[1] for o in outputs], second) > ALPHA
    assert chi_square_p([o.token_ids[2] for o in outputs], third) > ALPHA
    # the same seeds give the same tokens again
    again = engine.generate([prompt] * 50, params[:50])
    assert [o.token_ids for o in again] == [o.token_ids for o in outputs[:50]]


@pytest.mark.parametrize(("tp", "pp"), [(2, 1), (1, 2)])
def test_split_engines_verify_drafts_like_one_rank(tiny_root, tiny_engine_dir, tp, pp):
    # the verify step's logits rows travel as a step's sampled rows: to the other TP ranks
    # (the sampled tokens broadcast) and between pipeline stages (the logits sent back)
    prompts = [[*PROMPT, *PROMPT], [3, 9, 3, 9, 3], PROMPT]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    one_rank = LLMEngine.from_engine_dir(tiny_engine_dir, device="cpu")
    want = [o.token_ids for o in one_rank.generate(prompts, params)]
    split = LLMEngine.from_engine_dir(
        engine_dir(tiny_root, tp, pp),
        device="cpu",
        speculation={"method": "prompt_lookup", "num_draft_tokens": 3, "adaptive": False},
    )
    try:
        assert [o.token_ids for o in split.generate(prompts, params)] == want
        assert split.stats()["spec_num_drafted_tokens"] > 0
    finally:
        split.close()
