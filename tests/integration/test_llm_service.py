"""The engine behind the `tensorrt_llm` python model, without Triton: one responder thread answers
every request through `respond`, streaming or not, and a caller that is gone is cancelled."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import pytest

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.triton_models.llm_service import LLMService, OutputChunk

PROMPTS = ["The capital of France is", "Water boils at", "To make tea, first"]
NUM_TOKENS = 8


@pytest.fixture(scope="module")
def engine(smollm_engine_dir) -> LLMEngine:
    return LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu")


@pytest.fixture(scope="module")
def prompts(engine) -> list[list[int]]:
    return [engine.tokenizer.encode(p) for p in PROMPTS]


@pytest.fixture(scope="module")
def greedy(engine, prompts) -> list[list[int]]:
    outs = engine.generate(prompts, SamplingParams(max_tokens=NUM_TOKENS, ignore_eos=True))
    return [o.token_ids for o in outs]


class Recorder:
    """respond(): records chunks per context; returns False for contexts told to hang up."""

    def __init__(
        self,
        hang_up_after: dict | None = None,
        fail_for: set | None = None,
        gate: threading.Event | None = None,
    ):
        self.chunks: dict[str, list] = {}
        self.gate = gate
        self.hang_up_after = hang_up_after or {}
        self.fail_for = fail_for or set()
        self.finished = threading.Condition()
        self.threads: dict[str, set[str]] = {}  # context -> names of the threads that sent
        self.order: list[str] = []  # the context of every response, in the order sent
        self.in_flight = self.most_in_flight = 0

    def __call__(self, context, out) -> bool:
        if context in self.fail_for:
            raise OSError("client connection reset")
        with self.finished:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if self.gate is not None:  # a stalled transport: sends wait until the test opens it
            assert self.gate.wait(120)
        with self.finished:
            self.in_flight -= 1
            self.chunks.setdefault(context, []).append(out)
            self.order.append(context)
            self.threads.setdefault(context, set()).add(threading.current_thread().name)
            self.finished.notify_all()
        return len(self.chunks[context]) <= self.hang_up_after.get(context, 10**9)

    def wait_final(self, contexts, timeout_s: float = 120) -> None:
        def done():
            return all(
                c in self.chunks and getattr(self.chunks[c][-1], "is_final", True) for c in contexts
            )

        with self.finished:
            assert self.finished.wait_for(done, timeout_s), self.chunks.keys()


def arrays(prompt: list[int], streaming: bool, exclude_input: bool = True, **extra) -> dict:
    return {
        "input_ids": np.array([prompt], np.int32),
        "input_lengths": np.array([[len(prompt)]], np.int32),
        "request_output_len": np.array([[extra.get("max_tokens", NUM_TOKENS)]], np.int32),
        "end_id": np.array([[-1]], np.int32),  # no eos: exactly max_tokens, as greedy
        "streaming": np.array([[streaming]]),
        "exclude_input_in_output": np.array([[exclude_input]]),
    }


def wait_generated(svc: LLMService, num_tokens: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while svc.stats()["num_generated_tokens"] < num_tokens:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def service(
    smollm_engine_dir,
    respond,
    coalesce: bool = False,
    engine_process: bool = False,
    max_response_rate: float = 0,
    **kwargs,
) -> LLMService:
    return LLMService(
        smollm_engine_dir,
        "cpu",
        {"scheduler_policy": "guaranteed_no_evict", "enable_chunked_prefill": True},
        True,
        coalesce,
        max_response_rate,
        engine_process,
        respond,
        **kwargs,
    )


def test_streaming_and_whole_requests_are_answered_together(smollm_engine_dir, prompts, greedy):
    recorder = Recorder()
    svc = service(smollm_engine_dir, recorder)
    try:
        svc.generate(arrays(prompts[0], streaming=True), "stream")
        svc.generate(arrays(prompts[1], streaming=False), "whole")
        svc.generate(arrays(prompts[2], streaming=False, exclude_input=False), "with-prompt")
        recorder.wait_final(["stream", "whole", "with-prompt"])
    finally:
        svc.shutdown()  # the lanes are done: the stream's hops are in
    hops = svc.hops()
    assert 0 < hops["submit_ms_mean"] < hops["engine_first_token_ms_mean"]
    stream = recorder.chunks["stream"]
    assert [c.is_final for c in stream] == [False] * (NUM_TOKENS - 1) + [True]
    assert [t for c in stream for t in c.token_ids.tolist()] == greedy[0]
    (whole,) = recorder.chunks["whole"]
    assert whole.token_ids.tolist() == greedy[1] and whole.is_final
    (with_prompt,) = recorder.chunks["with-prompt"]
    assert with_prompt.token_ids.tolist() == prompts[2] + greedy[2]


def test_hops_younger_than_max_age_are_not_recomputed(smollm_engine_dir, prompts):
    recorder = Recorder()
    svc = service(smollm_engine_dir, recorder)
    try:
        svc.generate(arrays(prompts[0], streaming=True), "first")
        recorder.wait_final(["first"])
        first = svc.hops()
        svc.generate(arrays(prompts[1], streaming=True), "second")
        recorder.wait_final(["second"])
    finally:
        svc.shutdown()
    assert svc.hops(max_age_s=3600) == first
    assert svc.hops() != first  # two streams' hops now


def test_a_caller_gone_is_cancelled_and_a_failing_one_spares_the_others(
    smollm_engine_dir, prompts, greedy
):
    recorder = Recorder(hang_up_after={"gone": 1}, fail_for={"broken"})
    svc = service(smollm_engine_dir, recorder)
    try:
        svc.generate(arrays(prompts[0], streaming=True, max_tokens=100), "gone")
        svc.generate(arrays(prompts[1], streaming=True, max_tokens=100), "broken")
        svc.generate(arrays(prompts[2], streaming=True), "fine")
        recorder.wait_final(["fine"])
        deadline = time.monotonic() + 60
        while svc.stats()["num_running"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert svc.stats()["num_running"] == 0  # both 100-token requests left the engine
    finally:
        svc.shutdown()
    assert len(recorder.chunks["gone"]) == 2  # the chunk it hung up on, then nothing
    assert "broken" not in recorder.chunks
    assert [t for c in recorder.chunks["fine"] for t in c.token_ids.tolist()] == greedy[2]


def test_shutdown_closes_requests_in_flight(smollm_engine_dir, prompts):
    recorder = Recorder()
    svc = service(smollm_engine_dir, recorder)
    svc.generate(arrays(prompts[0], streaming=True, max_tokens=100), "open")
    with recorder.finished:
        recorder.finished.wait_for(lambda: "open" in recorder.chunks, 60)
    svc.shutdown()
    last = recorder.chunks["open"][-1]
    assert isinstance(last, OutputChunk) and last.is_final
    assert len(recorder.chunks["open"]) < 100
    with pytest.raises(RuntimeError, match="shut down"):
        svc.generate(arrays(prompts[0], streaming=True), "late")


def test_an_engine_failure_reaches_every_open_request_and_the_engine_comes_back(
    smollm_engine_dir, prompts, greedy, monkeypatch
):
    recorder = Recorder()
    svc = service(smollm_engine_dir, recorder)

    both_in = threading.Event()

    def broken_step(admit=None):
        both_in.wait(60)  # fail only once both requests are in
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(svc.async_engine.engine.engine, "step", broken_step)
    svc.generate(arrays(prompts[0], streaming=True), "a")
    svc.generate(arrays(prompts[1], streaming=False), "b")
    both_in.set()
    recorder.wait_final(["a", "b"])
    for context in ("a", "b"):
        (failure,) = recorder.chunks[context]
        assert "illegal memory access" in repr(failure)
    wait_ready(svc)  # a new engine, loaded again
    svc.generate(arrays(prompts[0], streaming=False), "after")
    recorder.wait_final(["after"])
    assert recorder.chunks["after"][0].token_ids.tolist() == greedy[0]
    svc.shutdown()


def wait_ready(svc: LLMService, timeout_s: float = 120) -> None:
    """Until the service's failed engine runs again (restarted once)."""
    deadline = time.monotonic() + timeout_s
    while not svc.is_ready:
        assert time.monotonic() < deadline, "the engine was not started again"
        time.sleep(0.05)
    assert svc.stats()["num_restarts"] == 1


def test_an_engine_process_answers_alike_and_its_death_fails_every_open_request_at_once(
    smollm_engine_dir, prompts, greedy
):
    recorder = Recorder()
    svc = service(smollm_engine_dir, recorder, engine_process=True)
    try:
        svc.generate(arrays(prompts[0], streaming=True), "stream")
        svc.generate(arrays(prompts[1], streaming=False), "whole")
        recorder.wait_final(["stream", "whole"])
        assert [t for c in recorder.chunks["stream"] for t in c.token_ids.tolist()] == greedy[0]
        assert recorder.chunks["whole"][0].token_ids.tolist() == greedy[1]
        deadline = time.monotonic() + 30
        while svc.stats()["num_generated_tokens"] < 2 * NUM_TOKENS:  # stats cross over too
            assert time.monotonic() < deadline
            time.sleep(0.05)

        svc.generate(arrays(prompts[0], streaming=True, max_tokens=100), "a")
        svc.generate(arrays(prompts[1], streaming=False, max_tokens=100), "b")
        with recorder.finished:
            assert recorder.finished.wait_for(lambda: "a" in recorder.chunks, 60)
        svc.async_engine.engine._process.kill()  # as the OOM killer would
        recorder.wait_final(["a", "b"])
        for context in ("a", "b"):
            assert "engine process exited" in repr(recorder.chunks[context][-1])
        with pytest.raises(RuntimeError, match="starting again; retry"):
            svc.generate(arrays(prompts[0], streaming=True), "late")
        wait_ready(svc)  # a new engine process
        with pytest.raises(ValueError, match="max_input_len"):  # limits still checked up front
            svc.generate(arrays(list(range(5000)), streaming=True), "too-long")
        svc.generate(arrays(prompts[1], streaming=False), "after")
        recorder.wait_final(["after"])
        assert recorder.chunks["after"][0].token_ids.tolist() == greedy[1]
    finally:
        svc.shutdown()


def test_services_with_one_share_key_share_one_engine_process_until_the_last_leaves(
    smollm_engine_dir, prompts, greedy, tmp_path
):
    key = f"test-{tmp_path.name}"
    first, second = Recorder(), Recorder()
    a = service(smollm_engine_dir, first, engine_process=True, share_engine=key)
    try:
        b = service(smollm_engine_dir, second, engine_process=True, share_engine=key)
    except BaseException:
        a.shutdown()
        raise
    process = a.async_engine.engine._process
    try:
        assert a.owns_engine and not b.owns_engine
        a.generate(arrays(prompts[0], streaming=True), "a0")
        b.generate(arrays(prompts[1], streaming=True), "b1")
        b.generate(arrays(prompts[2], streaming=False), "b2")
        first.wait_final(["a0"])
        second.wait_final(["b1", "b2"])
        assert [t for c in first.chunks["a0"] for t in c.token_ids.tolist()] == greedy[0]
        assert [t for c in second.chunks["b1"] for t in c.token_ids.tolist()] == greedy[1]
        assert second.chunks["b2"][0].token_ids.tolist() == greedy[2]
        assert set(first.chunks) == {"a0"}  # each gets its own requests' answers only

        # the spawner leaves in the middle of the other's request: the engine goes on serving
        b.generate(arrays(prompts[0], streaming=True, max_tokens=40), "long")
        with second.finished:
            assert second.finished.wait_for(lambda: "long" in second.chunks, 60)
        a.shutdown()
        assert process.poll() is None
        second.wait_final(["long"])
        assert sum(c.token_ids.size for c in second.chunks["long"]) == 40
        assert second.chunks["long"][-1].is_final
    finally:
        b.shutdown()
        a.shutdown()
    assert process.wait(30) == 0  # the last one out stops it


def test_services_that_start_together_still_share_one_engine(
    smollm_engine_dir, prompts, greedy, tmp_path
):
    """Both find no engine and spawn one: one child binds the name, the other's parent joins it."""
    key = f"test-{tmp_path.name}"
    recorders = [Recorder(), Recorder()]
    with ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(service, smollm_engine_dir, recorder, engine_process=True, share_engine=key)
            for recorder in recorders
        ]
    services = [future.result() for future in futures]
    try:
        assert sorted(svc.owns_engine for svc in services) == [False, True]
        for svc, prompt in zip(services, prompts, strict=False):
            svc.generate(arrays(prompt, streaming=False), "x")
        for recorder, want in zip(recorders, greedy, strict=False):
            recorder.wait_final(["x"])
            assert recorder.chunks["x"][0].token_ids.tolist() == want
    finally:
        for svc in services:
            svc.shutdown()


@pytest.mark.parametrize("max_response_rate", [0, 4], ids=["stalled-responder", "paced"])
def test_queued_tokens_of_a_stream_go_out_at_once(
    smollm_engine_dir, prompts, greedy, max_response_rate
):
    gate = None if max_response_rate else threading.Event()
    recorder = Recorder(gate=gate)
    svc = service(smollm_engine_dir, recorder, coalesce=True, max_response_rate=max_response_rate)
    try:
        svc.generate(arrays(prompts[0], streaming=True), "stream")
        svc.generate(arrays(prompts[1], streaming=False), "whole")
        if gate is not None:
            wait_generated(svc, 2 * NUM_TOKENS)
            gate.set()
        recorder.wait_final(["stream", "whole"])
    finally:
        svc.shutdown()
    stream = recorder.chunks["stream"]
    assert len(stream) < NUM_TOKENS  # some responses carried several tokens
    if max_response_rate:  # a stream's first token is not held back
        assert len(stream[0].token_ids) == 1
    assert [t for c in stream for t in c.token_ids.tolist()] == greedy[0]
    assert [c.is_final for c in stream] == [False] * (len(stream) - 1) + [True]
    (whole,) = recorder.chunks["whole"]
    assert whole.token_ids.tolist() == greedy[1]


def test_lanes_send_streams_side_by_side_each_in_order(smollm_engine_dir, prompts, greedy):
    # Sends hang until every token is generated, however slow the machine's steps are, so the
    # later tokens of each stream must queue behind its first send and leave merged.
    recorder = Recorder(gate=threading.Event())
    svc = service(smollm_engine_dir, recorder, coalesce=True, response_lanes=3)
    try:
        for i, prompt in enumerate(prompts):
            svc.generate(arrays(prompt, streaming=True), f"stream{i}")
        wait_generated(svc, len(prompts) * NUM_TOKENS)
        recorder.gate.set()
        recorder.wait_final([f"stream{i}" for i in range(len(prompts))])
    finally:
        svc.shutdown()
    assert recorder.most_in_flight > 1  # sends overlapped
    lanes = [recorder.threads[f"stream{i}"] for i in range(len(prompts))]
    assert all(len(names) == 1 for names in lanes)  # a stream keeps its lane: its order holds
    assert len(set.union(*lanes)) == len(prompts)
    for i, expected in enumerate(greedy):
        stream = recorder.chunks[f"stream{i}"]
        assert [t for c in stream for t in c.token_ids.tolist()] == expected
        assert [c.is_final for c in stream] == [False] * (len(stream) - 1) + [True]
        assert len(stream) < NUM_TOKENS  # tokens that came while a send was out went merged


def test_streams_behind_an_engine_process_and_a_stalled_stub_join_to_the_whole_answers(
    smollm_engine_dir, prompts, greedy
):
    # Sends hang until every token is generated: each stream's tokens cross the engine process's
    # socket as the engine makes them, wait in the stub, and leave merged; concatenated, each
    # stream is the answer its prompt gets whole, every token once and in order.
    recorder = Recorder(gate=threading.Event())
    svc = service(
        smollm_engine_dir,
        recorder,
        coalesce=True,
        engine_process=True,
        max_response_rate=2000,
        response_lanes=2,
    )
    streams = [f"stream{i}" for i in range(len(prompts))]
    try:
        for context, prompt in zip(streams, prompts, strict=True):
            svc.generate(arrays(prompt, streaming=True), context)
            svc.generate(arrays(prompt, streaming=False), f"whole-{context}")
        wait_generated(svc, 2 * len(prompts) * NUM_TOKENS)
        recorder.gate.set()
        recorder.wait_final([*streams, *(f"whole-{c}" for c in streams)])
    finally:
        svc.shutdown()
    for context, expected in zip(streams, greedy, strict=True):
        stream = recorder.chunks[context]
        (whole,) = recorder.chunks[f"whole-{context}"]
        assert [t for c in stream for t in c.token_ids.tolist()] == whole.token_ids.tolist()
        assert whole.token_ids.tolist() == expected
        assert [c.is_final for c in stream] == [False] * (len(stream) - 1) + [True]
        assert len(stream) < NUM_TOKENS  # tokens that came while a send was out went merged


def test_a_lane_sends_a_final_response_before_others_first_ones(smollm_engine_dir, prompts):
    # One lane, its first send (stream a's first token) held: stream b's first response queues,
    # then request w ends. w's final response goes next: its client's next request waits on it.
    recorder = Recorder(gate=threading.Event())
    svc = service(smollm_engine_dir, recorder, coalesce=True, response_lanes=1)
    try:
        svc.generate(arrays(prompts[0], streaming=True), "a")
        svc.generate(arrays(prompts[1], streaming=True), "b")
        svc.generate(arrays(prompts[2], streaming=False, max_tokens=2), "w")
        deadline = time.monotonic() + 60
        # a's send taken off the lane and held there, then b's first and w's final queued:
        # waiting on the queue alone also passes while a's first still sits in it beside b's
        while recorder.in_flight < 1 or svc._lanes[0].qsize() < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        recorder.gate.set()
        recorder.wait_final(["a", "b", "w"])
    finally:
        svc.shutdown()
    assert recorder.order[:3] == ["a", "w", "b"]


def test_text_of_split_characters_comes_whole_from_the_responder(smollm_engine_dir, engine):
    prompt = engine.tokenizer.encode("日本の首都は")
    recorder = Recorder()
    tokenizer_dir = smollm_engine_dir / "tokenizer"
    svc = service(smollm_engine_dir, recorder, tokenizer_dir=tokenizer_dir)
    try:
        svc.generate(arrays(prompt, streaming=True), "stream", wants_text=True)
        svc.generate(arrays(prompt, streaming=False, exclude_input=False), "whole", True)
        svc.generate(arrays(prompt, streaming=True), "ids")
        recorder.wait_final(["stream", "whole", "ids"])
    finally:
        svc.shutdown()
    stream, (whole,) = recorder.chunks["stream"], recorder.chunks["whole"]
    tokens = [t for c in stream for t in c.token_ids.tolist()]
    decode = partial(engine.tokenizer.decode, skip_special_tokens=True)  # as postprocessing
    assert "".join(c.text for c in stream) == decode(tokens)
    assert "" in [c.text for c in stream[:-1]]  # a character's first bytes waited for the rest
    assert not any("\ufffd" in c.text for c in stream[:-1])
    assert whole.text == decode(prompt + tokens)
    assert all(c.text is None for c in recorder.chunks["ids"])
