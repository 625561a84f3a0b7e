"""One python stub's side of the engine hop for bench_engine_hop: an LLMService with its engine in
a process of its own (engine_process=true, as served), --streams streaming requests at a time in
a closed loop, answered through a stand-in for the python backend's send. Prints one JSON line:
CPU seconds of this process (the stub's side: submits, the engine reader, responder and lanes)
and of the engine process over the timed requests, tokens delivered, IPC messages and responses.
The engine's forward is stubbed (engine_hop_child.py): its steps are the host's work alone. Run
by path with PYTHONPATH naming the source tree to measure, so the same runner measures this
tree and a --before-tree. --busy-stub: a thread that holds this process's GIL in turns (the
stub's tokenizing and execute() work), so its engine reader falls behind the engine's steps."""

import argparse
import contextlib
import json
import os
import queue
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from pipeline.triton_models import llm_service

RUNTIME = {"scheduler_policy": "guaranteed_no_evict", "enable_chunked_prefill": True}


class CountingQueue(queue.SimpleQueue):
    """The service's outbox, counting the engine's messages (a step's deltas, or several merged)
    and their rows."""

    num_messages = 0
    num_rows = 0

    def put(self, item, block=True, timeout=None):
        if isinstance(item, list):
            CountingQueue.num_messages += 1
            CountingQueue.num_rows += len(item)
        super().put(item, block, timeout)


class Sender:
    """respond(): counts responses and tokens; a send waits send_us without the GIL, as the python
    backend's send waits for the server to take the response."""

    def __init__(self, send_us: float, done: queue.SimpleQueue):
        self.send_s, self.done = send_us / 1e6, done
        self.num_responses = self.num_tokens = 0
        self.tokens: dict = {}

    def __call__(self, context, out) -> bool:
        if isinstance(out, BaseException):
            raise out
        if self.send_s:
            time.sleep(self.send_s)
        self.num_responses += 1
        self.num_tokens += out.token_ids.size
        self.tokens.setdefault(context, []).extend(out.token_ids.tolist())
        if out.is_final:
            self.done.put(context)
        return True


def arrays(prompt: list[int], output_len: int) -> dict:
    return {
        "input_ids": np.array([prompt], np.int32),
        "input_lengths": np.array([[len(prompt)]], np.int32),
        "request_output_len": np.array([[output_len]], np.int32),
        "end_id": np.array([[-1]], np.int32),
        "streaming": np.array([[True]]),
        "exclude_input_in_output": np.array([[True]]),
    }


def busy(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(20_000))  # Python work: holds the GIL until the switch interval


def stubbed_engine_python(tmp: Path) -> str:
    """A PATH dir whose python3 starts engine_hop_child.py: the served engine process with its
    forward stubbed (the service starts its engine process with python3 from PATH)."""
    launcher = tmp / "python3"
    child = Path(__file__).resolve().parent / "engine_hop_child.py"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{child}" "$@"\n')
    launcher.chmod(0o755)
    return str(tmp)


def run(args: argparse.Namespace) -> dict:
    done: queue.SimpleQueue = queue.SimpleQueue()
    sender = Sender(args.send_us, done)
    real_queue = llm_service.queue.SimpleQueue
    llm_service.queue.SimpleQueue = CountingQueue  # the outbox the engine's reader fills
    tmp = tempfile.TemporaryDirectory(prefix="engine-hop-")
    os.environ["PATH"] = stubbed_engine_python(Path(tmp.name)) + os.pathsep + os.environ["PATH"]
    try:
        svc = llm_service.LLMService(
            args.engine_dir, "cpu", RUNTIME, True, True, args.max_response_rate, True, sender,
            response_lanes=args.lanes,
        )  # fmt: skip
    finally:
        llm_service.queue.SimpleQueue = real_queue
    engine = psutil.Process(svc.async_engine.engine._process.pid)
    prompt = [1 + i % 200 for i in range(args.input_len)]
    sampler = None
    if args.stacks:  # this runner is run by path: its own directory is on sys.path
        from stack_sampler import Sampler

        sampler = Sampler()
    stop = threading.Event()
    if args.busy_stub:
        threading.Thread(target=busy, args=(stop,), daemon=True).start()

    def closed_loop(num_requests: int, tag: str) -> None:
        started = 0
        for _ in range(min(args.streams, num_requests)):
            svc.generate(arrays(prompt, args.output_len), f"{tag}{started}")
            started += 1
        for _ in range(num_requests):
            done.get(timeout=600)
            if started < num_requests:
                svc.generate(arrays(prompt, args.output_len), f"{tag}{started}")
                started += 1

    try:
        closed_loop(args.streams, "warm")
        counts = (CountingQueue.num_messages, CountingQueue.num_rows, sender.num_responses)
        tokens_before, steps_before = sender.num_tokens, svc.stats()["num_steps"]
        stub_cpu, engine_cpu = time.process_time(), sum(engine.cpu_times()[:2])
        start = time.perf_counter()
        with sampler if sampler is not None else contextlib.nullcontext():
            closed_loop(args.requests, "r")
        wall = time.perf_counter() - start
        stub_cpu = time.process_time() - stub_cpu
        engine_cpu = sum(engine.cpu_times()[:2]) - engine_cpu
        num_steps = svc.stats()["num_steps"] - steps_before
    finally:
        stop.set()
        svc.shutdown()
    if sampler is not None:
        Path(args.stacks).write_text(sampler.report() + "\n")
    tokens = sender.num_tokens - tokens_before
    streams = [t for c, t in sender.tokens.items() if c.startswith("r")]
    return {
        "tokens": tokens,
        "wall_s": wall,
        "out_tok_s": tokens / wall,
        "stub_cpu_s": stub_cpu,
        "engine_cpu_s": engine_cpu,
        "stub_cpu_us_per_token": stub_cpu / tokens * 1e6,
        "engine_cpu_us_per_token": engine_cpu / tokens * 1e6,
        "engine_steps": num_steps,
        "ipc_messages": CountingQueue.num_messages - counts[0],
        "ipc_rows": CountingQueue.num_rows - counts[1],
        "responses": sender.num_responses - counts[2],
        "complete_streams": sum(len(t) == args.output_len for t in streams),
        "num_streams": len(streams),
        "same_tokens": len({tuple(t) for t in streams}) == 1,  # greedy, one prompt
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine-dir", required=True)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--input-len", type=int, default=16)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--send-us", type=float, default=50.0)
    parser.add_argument("--lanes", type=int, default=4)
    parser.add_argument("--max-response-rate", type=float, default=500.0)
    parser.add_argument("--busy-stub", action="store_true")
    parser.add_argument("--stacks", default="", help="write the threads' sampled stacks here")
    args = parser.parse_args()
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
