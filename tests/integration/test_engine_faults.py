"""One bad request fails alone: values the sampler cannot take are refused before the engine sees
them, a request whose launch fails is found and failed by itself while the rest of its batch
goes on, and an engine whose model no longer runs says so (EngineFailure) instead of limping.

Real SmolLM2 (fp32, CPU), overlap scheduling on (a launch in flight when another fails)."""

import math

import pytest

from pipeline.engine import AsyncLLMEngine, LLMEngine, SamplingParams
from pipeline.engine.core.llm_engine import EngineFailure

PROMPTS = ["The capital of France is", "def fibonacci(n):", "The quick brown fox", "Water boils at"]
GREEDY = SamplingParams(max_tokens=8)
POISON_TEMPERATURE = 0.77  # the sampler below fails every batch that holds this request


@pytest.fixture(scope="module")
def engine(smollm_engine_dir) -> LLMEngine:
    return LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu", overlap_scheduling=True)


@pytest.fixture(scope="module")
def reference(engine) -> list[list[int]]:
    return [out.token_ids for out in engine.generate(PROMPTS, GREEDY)]


@pytest.mark.parametrize(
    "knobs, field",
    [
        ({"temperature": math.nan, "top_k": 5}, "temperature"),
        ({"temperature": math.inf}, "temperature"),
        ({"temperature": -1.0}, "temperature"),
        ({"top_p": math.nan}, "top_p"),
        ({"max_tokens": 2**40}, "max_tokens"),
        ({"seed": 2**64}, "seed"),
        ({"seed": -1}, "seed"),
    ],
)
def test_a_value_the_sampler_cannot_take_is_refused_naming_it(knobs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**knobs)


@pytest.mark.parametrize(
    "knobs, what",
    [
        ({"bad_sequences": ((999_999_999,),)}, "bad words"),
        ({"bad_sequences": ((5, -1),)}, "bad words"),
        ({"stop_sequences": ((49_152,),)}, "stop words"),
        ({"end_id": 10**9}, "end_id"),
    ],
)
def test_token_ids_outside_the_vocabulary_are_refused(engine, reference, knobs, what):
    async_engine = AsyncLLMEngine(engine)
    try:
        prompt = engine.tokenizer.encode(PROMPTS[0])
        with pytest.raises(ValueError, match=f"{what}.*outside the vocabulary"):
            async_engine.submit(prompt, SamplingParams(max_tokens=8, **knobs))
        deltas = list(async_engine.submit(prompt, GREEDY))  # the engine still serves
        assert [t for d in deltas for t in d.token_ids] == reference[0]
    finally:
        async_engine.shutdown()


def _poison_sampler(monkeypatch, engine) -> None:
    sampler = engine.model_runner.sampler
    forward = sampler.forward

    def poisoned(logits, params):
        temperatures = params.temperatures
        if temperatures is not None and (temperatures == POISON_TEMPERATURE).any():
            raise IndexError("index out of range in the sampler")
        return forward(logits, params)

    monkeypatch.setattr(sampler, "forward", poisoned)


def test_a_request_whose_launch_fails_fails_alone(engine, reference, monkeypatch):
    _poison_sampler(monkeypatch, engine)
    poisoned = SamplingParams(max_tokens=8, temperature=POISON_TEMPERATURE, seed=1)
    prompts = [*PROMPTS[:2], "Hello", *PROMPTS[2:]]
    params = [GREEDY, GREEDY, poisoned, GREEDY, GREEDY]
    outputs = engine.generate(prompts, params)
    assert outputs[2].finish_reason == "error"
    healthy = [out for i, out in enumerate(outputs) if i != 2]
    assert [out.token_ids for out in healthy] == reference
    assert all(out.finish_reason in ("stop", "length") for out in healthy)
    assert not engine.scheduler.suspects and not engine.has_unfinished()
    # and the engine goes on serving, batched
    assert [out.token_ids for out in engine.generate(PROMPTS, GREEDY)] == reference


def test_a_failed_request_ends_with_an_error_on_its_handle_only(engine, reference, monkeypatch):
    _poison_sampler(monkeypatch, engine)
    async_engine = AsyncLLMEngine(engine)
    try:
        ids = [engine.tokenizer.encode(p) for p in PROMPTS]
        handles = [async_engine.submit(i, GREEDY) for i in ids[:2]]
        bad = async_engine.submit(ids[2], SamplingParams(max_tokens=8, temperature=0.77, seed=3))
        handles += [async_engine.submit(i, GREEDY) for i in ids[2:]]
        with pytest.raises(RuntimeError, match="failed: IndexError"):
            list(bad)
        tokens = [[t for d in handle for t in d.token_ids] for handle in handles]
        assert tokens == [reference[0], reference[1], reference[2], reference[3]]
    finally:
        async_engine.shutdown()


def test_an_engine_whose_model_fails_raises_engine_failure(smollm_engine_dir, monkeypatch):
    engine = LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu")

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(engine.model_runner, "launch", broken)
    monkeypatch.setattr(engine, "prompt_logits", broken)
    async_engine = AsyncLLMEngine(engine)
    handle = async_engine.submit(engine.tokenizer.encode(PROMPTS[0]), GREEDY)
    with pytest.raises(RuntimeError, match="engine failed") as failed:
        list(handle)
    assert isinstance(failed.value.__cause__, EngineFailure)
    with pytest.raises(RuntimeError, match="AsyncLLMEngine failed"):
        async_engine.submit(engine.tokenizer.encode(PROMPTS[1]), GREEDY)


@pytest.mark.parametrize(
    "knobs, named",
    [
        ({"temperature": 1e308}, "temperature=1e+308 must be in [0.0, 1000000.0]"),
        ({"repetition_penalty": 1e308}, "repetition_penalty=1e+308 must be in [1e-06, "),
        ({"repetition_penalty": 1e-30}, "repetition_penalty=1e-30 must be in [1e-06, "),
        ({"presence_penalty": 1e308}, "presence_penalty=1e+308 must be in [-2.0, 2.0]"),
        ({"frequency_penalty": -3.0}, "frequency_penalty=-3.0 must be in [-2.0, 2.0]"),
    ],
)
def test_a_value_that_overflows_float32_in_the_sampler_is_refused(knobs, named):
    with pytest.raises(ValueError) as info:
        SamplingParams(**knobs)
    assert named in str(info.value)


def test_the_edges_of_every_bounded_knob_sample_finite_tokens(engine):
    """At the ends of their ranges, together, the knobs still give a finite distribution."""
    edges = [
        SamplingParams(
            max_tokens=4, ignore_eos=True, seed=1, temperature=1e6, repetition_penalty=1e6,
            presence_penalty=2.0, frequency_penalty=2.0,
        ),
        SamplingParams(
            max_tokens=4, ignore_eos=True, seed=2, temperature=1e-5, repetition_penalty=1e-6,
            presence_penalty=-2.0, frequency_penalty=-2.0,
        ),
    ]  # fmt: skip
    for out in engine.generate([PROMPTS[0], PROMPTS[0]], edges):
        assert len(out.token_ids) == 4
