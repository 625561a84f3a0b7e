"""Sampling, stop rules, cancellation, request checks and the async front, on real SmolLM2."""

import itertools
import threading
import time

import pytest

from pipeline.engine import AsyncLLMEngine, LLMEngine, SamplingParams, StreamDelta
from pipeline.engine.core.engine_times import ms_per_launch
from pipeline.engine.core.launch_policy import LaunchPacer
from pipeline.errors import ConfigError

PROMPT = "My favourite animal is the"
NUM_TOKENS = 8


# overlap: step N+1 launches before step N's tokens are read (CUDA's default), so stop rules,
# bans and cancels act one step late and must drop the extra token; multistep: each launch is
# also followed by 2 more decode steps, whose tokens reach the host together (a stop drops those
# after it)
@pytest.fixture(
    scope="module", params=[(False, 1), (True, 1), (True, 3)], ids=["sync", "overlap", "multistep"]
)
def engine(smollm_engine_dir, request) -> LLMEngine:
    overlap, num_steps = request.param
    return LLMEngine.from_engine_dir(
        smollm_engine_dir,
        device="cpu",
        overlap_scheduling=overlap,
        num_scheduler_steps=num_steps,
    )


def steps_for(engine, num_tokens: int) -> int:
    """Steps the engine runs for num_tokens tokens of one request: whole launches."""
    k = engine.num_scheduler_steps
    return -(-num_tokens // k) * k


@pytest.fixture(scope="module")
def prompt(engine) -> list[int]:
    return engine.tokenizer.encode(PROMPT)


@pytest.fixture(scope="module")
def greedy(engine, prompt) -> list[int]:
    (out,) = engine.generate([prompt], SamplingParams(max_tokens=NUM_TOKENS, ignore_eos=True))
    assert out.finish_reason == "length" and len(out.token_ids) == NUM_TOKENS
    return out.token_ids


def one(engine, prompt, **params):
    (out,) = engine.generate([prompt], SamplingParams(**params))
    return out


def test_seeded_sampling_repeats_alone_and_in_a_batch(engine, prompt):
    params = SamplingParams(max_tokens=NUM_TOKENS, temperature=1.0, top_k=50, seed=1234)
    first = engine.generate([prompt], params)[0].token_ids
    others = [SamplingParams(max_tokens=4), SamplingParams(max_tokens=6, temperature=1.0, seed=7)]
    batched = engine.generate([prompt, prompt, prompt[:3]], [params, *others])[0].token_ids
    assert first == batched
    draws = {
        tuple(one(engine, prompt, max_tokens=NUM_TOKENS, temperature=1.0, seed=s).token_ids)
        for s in (1, 2, 3)
    }
    assert len(draws) > 1


def test_top_k_one_equals_greedy(engine, prompt, greedy):
    out = one(engine, prompt, max_tokens=NUM_TOKENS, temperature=0.9, top_k=1, ignore_eos=True)
    assert out.token_ids == greedy


def test_max_tokens_ends_with_length(engine, prompt, greedy):
    out = one(engine, prompt, max_tokens=3, ignore_eos=True)
    assert out.token_ids == greedy[:3] and out.finish_reason == "length"


def test_end_id_stops_before_it(engine, prompt, greedy):
    end = greedy[2]
    out = one(engine, prompt, max_tokens=NUM_TOKENS, end_id=end)
    assert out.token_ids == greedy[: greedy.index(end)] and out.finish_reason == "stop"


def test_stop_token_and_stop_sequence_are_kept(engine, prompt, greedy):
    stop = greedy[3]
    out = one(engine, prompt, max_tokens=NUM_TOKENS, stop_token_ids=[stop], ignore_eos=True)
    assert out.token_ids == greedy[: greedy.index(stop) + 1] and out.finish_reason == "stop"
    seq = tuple(greedy[4:6])
    end = next(i for i in range(1, NUM_TOKENS) if tuple(greedy[i - 1 : i + 1]) == seq)
    out = one(engine, prompt, max_tokens=NUM_TOKENS, stop_sequences=[seq], ignore_eos=True)
    assert out.token_ids == greedy[: end + 1] and out.finish_reason == "stop"


def test_bad_sequences_are_never_generated(engine, prompt, greedy):
    out = one(engine, prompt, max_tokens=2, bad_sequences=[[greedy[0]]], ignore_eos=True)
    assert out.token_ids[0] != greedy[0]
    out = one(engine, prompt, max_tokens=2, bad_sequences=[greedy[:2]], ignore_eos=True)
    assert out.token_ids[0] == greedy[0] and out.token_ids[1] != greedy[1]


def test_overlap_reports_a_launch_one_call_later_and_wastes_one_on_a_stop(engine, prompt, greedy):
    def run(**params) -> tuple[list[list[int]], int, int]:
        before = engine.stats()
        engine.add_request(prompt, SamplingParams(max_tokens=NUM_TOKENS, **params))
        per_call = [[t for d in engine.step() for t in d.token_ids]]
        while engine.has_unfinished():
            per_call.append([t for d in engine.step() for t in d.token_ids])
        after = engine.stats()
        steps = after["num_steps"] - before["num_steps"]
        return per_call, steps, after["num_scheduled_tokens"] - before["num_scheduled_tokens"]

    late, k = int(engine.overlap_scheduling), engine.num_scheduler_steps
    per_call, steps, scheduled = run(ignore_eos=True)
    assert per_call[0] == greedy[:k] * (1 - late) and sum(per_call, []) == greedy
    # a launch whose tokens must reach max_tokens is the last one, in either mode
    num_steps = steps_for(engine, NUM_TOKENS)
    assert (steps, scheduled) == (num_steps, len(prompt) + num_steps - 1)
    end = greedy.index(greedy[2])
    per_call, steps, scheduled = run(end_id=greedy[2])
    assert sum(per_call, []) == greedy[:end]
    # the end token is known one launch late: that launch was for nothing (unless the one with
    # the end token already reached max_tokens)
    num_steps = min((end // k + 1 + late) * k, steps_for(engine, NUM_TOKENS))
    assert (steps, scheduled) == (num_steps, len(prompt) + num_steps - 1)
    assert engine.stats()["num_free_blocks"] == engine.stats()["num_total_blocks"]


def test_steps_with_prompt_tokens_and_batch_sizes_are_counted(engine, prompt):
    before = engine.stats()
    engine.add_request(prompt, SamplingParams(max_tokens=3, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    after = engine.stats()
    num_steps = steps_for(engine, 3)
    assert after["num_steps"] - before["num_steps"] == num_steps
    assert after["num_prompt_steps"] - before["num_prompt_steps"] == 1  # then decodes
    assert after["num_scheduled_seqs"] - before["num_scheduled_seqs"] == num_steps
    # two requests share their steps: 2 sequences a step
    before = after
    for _ in range(2):
        engine.add_request(prompt, SamplingParams(max_tokens=2, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    after = engine.stats()
    num_steps = steps_for(engine, 2)
    assert after["num_steps"] - before["num_steps"] == num_steps
    assert after["num_scheduled_seqs"] - before["num_scheduled_seqs"] == 2 * num_steps


def test_launch_timer_accounts_for_the_host_time(engine, prompt):
    before = engine.stats()
    engine.add_request(prompt, SamplingParams(max_tokens=5, ignore_eos=True))
    started = time.perf_counter()
    num_calls = 0
    while engine.has_unfinished():
        engine.step()
        num_calls += 1
        time.sleep(0.01)  # the caller's own work, between calls
    wall_ms = 1e3 * (time.perf_counter() - started)
    after = engine.stats()
    num_launches = after["num_launches"] - before["num_launches"]
    assert num_launches == steps_for(engine, 5) // engine.num_scheduler_steps
    times = ms_per_launch(after, before)
    assert all(value >= 0 for value in times.values())
    # each part is a share of the wall time; the CPU this thread ran is a part of its host time
    spent_ms = num_launches * sum(times[k] for k in times if k != "host_cpu_ms_per_launch")
    assert spent_ms <= wall_ms
    assert times["host_cpu_ms_per_launch"] <= times["host_ms_per_launch"] * 1.05 + 0.1
    # away: the sleeps between calls while a launch was in flight (overlap scheduling)
    if engine.overlap_scheduling:
        assert times["away_ms_per_launch"] >= 9.0


def test_steps_a_launch_may_change_between_launches(smollm_engine_dir):
    """The pacer may change the count at any launch, up to the max the engine reserved for."""
    engine = LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu", num_scheduler_steps=3)
    prompts = [engine.tokenizer.encode(PROMPT), engine.tokenizer.encode("The capital of France")]
    params = [SamplingParams(max_tokens=13, ignore_eos=True), SamplingParams(max_tokens=6)]
    fixed = [out.token_ids for out in engine.generate(prompts, params)]
    pacer = LaunchPacer(1, 3)
    counts = itertools.cycle([2, 1, 3])
    pacer.observe = lambda *observed: setattr(pacer, "num_steps", next(counts))
    engine.launch_policy.pacer = pacer
    before = engine.stats()
    assert [out.token_ids for out in engine.generate(prompts, params)] == fixed
    after = engine.stats()
    assert after["num_steps"] - before["num_steps"] > after["num_launches"] - before["num_launches"]
    assert engine.stats()["num_free_blocks"] == engine.stats()["num_total_blocks"]


def test_abort_cancels_and_frees_blocks(engine, prompt):
    request_id = engine.add_request(prompt, SamplingParams(max_tokens=50))
    for _ in range(2):
        engine.step()
    assert engine.stats()["num_free_blocks"] < engine.stats()["num_total_blocks"]
    assert engine.abort(request_id)
    assert engine.step() == [StreamDelta(request_id, [], True, "cancelled")]
    assert not engine.has_unfinished() and not engine.abort(request_id)
    assert engine.stats()["num_free_blocks"] == engine.stats()["num_total_blocks"]


def test_requests_the_engine_cannot_serve_raise_value_error(engine, prompt):
    with pytest.raises(ValueError, match="max_input_len"):
        engine.add_request([1] * 193, SamplingParams())
    with pytest.raises(ValueError, match="max_seq_len"):
        engine.add_request(prompt, SamplingParams(max_tokens=256))
    with pytest.raises(ValueError, match="empty"):
        engine.add_request([], SamplingParams())
    with pytest.raises(ValueError, match="vocabulary"):
        engine.add_request([10**6], SamplingParams())
    assert not engine.has_unfinished()


def test_runtime_options_above_build_limits_are_refused(smollm_engine_dir):
    with pytest.raises(ConfigError, match="max_batch_size=9"):
        LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu", max_batch_size=9)
    with pytest.raises(ConfigError, match="unknown runtime options"):
        LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu", max_batch=2)
    with pytest.raises(ConfigError, match="scheduler_policy"):
        LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu", scheduler_policy="fifo")
    with pytest.raises(ConfigError, match="num_scheduler_steps=0 must be >= 1"):
        LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu", num_scheduler_steps=0)


def test_steps_a_launch_are_one_without_cuda_graphs_unless_set(smollm_engine_dir):
    assert LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu").num_scheduler_steps == 1


def test_async_engine_streams_to_two_threads_and_cancels(engine, prompt, greedy):
    aeng = AsyncLLMEngine(engine)
    results, errors = {}, []

    def client(name: str, params: SamplingParams, cancel_after: int | None = None):
        try:
            handle = aeng.submit(prompt, params)
            tokens, deltas = [], []
            for delta in handle:
                deltas.append(delta)
                tokens.extend(delta.token_ids)
                if cancel_after is not None and len(tokens) >= cancel_after:
                    handle.cancel()
            results[name] = (tokens, deltas[-1].finish_reason, len(deltas))
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [
        threading.Thread(
            target=client, args=("a", SamplingParams(max_tokens=NUM_TOKENS, ignore_eos=True))
        ),
        threading.Thread(target=client, args=("b", SamplingParams(max_tokens=100), 3)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    with pytest.raises(ValueError, match="max_seq_len"):
        aeng.submit(prompt, SamplingParams(max_tokens=1000))
    aeng.shutdown()
    assert not errors
    tokens_a, reason_a, num_deltas_a = results["a"]
    assert tokens_a == greedy and reason_a == "length"
    assert num_deltas_a == steps_for(engine, NUM_TOKENS) // engine.num_scheduler_steps
    tokens_b, reason_b, _ = results["b"]
    assert reason_b == "cancelled" and 3 <= len(tokens_b) < 100
    assert tokens_b[:3] == greedy[:3]
    with pytest.raises(RuntimeError, match="shut down"):
        aeng.submit(prompt, SamplingParams())


def test_shutdown_cancels_requests_in_flight(engine, prompt):
    aeng = AsyncLLMEngine(engine)
    deltas = iter(aeng.submit(prompt, SamplingParams(max_tokens=100)))
    assert len(next(deltas).token_ids) == engine.num_scheduler_steps
    aeng.shutdown()
    assert list(deltas)[-1].finish_reason == "cancelled"
    engine.step()  # hands back the abort's delta; the engine is reusable
    assert not engine.has_unfinished()
    assert engine.stats()["num_free_blocks"] == engine.stats()["num_total_blocks"]
