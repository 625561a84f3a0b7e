"""Direct mode's load generator: drives LLMEngine.step() itself, in one thread, the way
trtllm-bench drives the executor. Requests are admitted between steps (up to `concurrency` in
flight; in mode=rate when their Poisson arrival time has come) and each step's tokens are stamped
when step() returns, which is when a server could first send them. No client threads share the
GIL with the engine, so this is the engine's own speed: the "without the server" side.

It also records what the engine's stats() said after every step (peak running/waiting, free
KV blocks, preemptions), which is how the sweep sees the KV-capacity threshold.
"""

import logging
import time
from collections import deque
from collections.abc import Sequence

from tqdm import tqdm

from pipeline.bench.arrivals import arrival_offsets
from pipeline.bench.load_generator import check_load_shape
from pipeline.bench.records import RequestRecord
from pipeline.bench.workload import BenchRequest

log = logging.getLogger(__name__)


class DirectDriver:
    name = "direct"

    def __init__(
        self,
        engine,
        mode: str,
        concurrency: int,
        request_rate: float,
        temperature: float,
        seed: int,
        origin_s: float,
    ) -> None:
        check_load_shape(mode, concurrency)
        self.engine = engine
        self.mode, self.concurrency, self.request_rate = mode, concurrency, request_rate
        self.temperature, self.seed, self.origin_s = temperature, seed, origin_s
        self.engine_stats: dict = {}  # of the last run(): peaks seen after each step

    def now(self) -> float:
        return time.perf_counter() - self.origin_s

    def _params(self, request: BenchRequest):
        from pipeline.request import SamplingParams

        return SamplingParams(
            max_tokens=request.max_tokens,
            temperature=self.temperature,
            seed=self.seed if self.temperature > 0 else None,
            ignore_eos=request.ignore_eos,
        )

    def _watch(self, stats: dict, preemptions_at_start: int) -> None:
        peaks = self.engine_stats
        peaks["peak_running"] = max(peaks.get("peak_running", 0), stats["num_running"])
        peaks["peak_waiting"] = max(peaks.get("peak_waiting", 0), stats["num_waiting"])
        peaks["min_free_blocks"] = min(
            peaks.get("min_free_blocks", stats["num_free_blocks"]), stats["num_free_blocks"]
        )
        peaks["num_total_blocks"] = stats["num_total_blocks"]
        peaks["num_preemptions"] = stats["num_preemptions"] - preemptions_at_start

    def _admit(self, pending: deque, in_flight: dict, bar: tqdm) -> None:
        now = self.now()
        while pending and len(in_flight) < self.concurrency and pending[0][1].scheduled_s <= now:
            request, record = pending.popleft()
            record.start_s = now
            try:
                self.engine.add_request(
                    list(request.prompt_token_ids), self._params(request), request.request_id
                )
                in_flight[request.request_id] = record
            except ValueError as exc:  # can never be served: a measured error
                record.error, record.end_s = f"ValueError: {exc}"[:300], now
                bar.update(1)

    def _loop(self, pending: deque, in_flight: dict, bar: tqdm, preemptions_at_start: int):
        while pending or in_flight:
            self._admit(pending, in_flight, bar)
            if not in_flight:
                if pending:  # nothing running: wait for the next arrival
                    time.sleep(max(0.0, pending[0][1].scheduled_s - self.now()))
                continue
            # arrivals up to the moment the engine schedules join this step (mode=rate)
            deltas = self.engine.step(admit=lambda: self._admit(pending, in_flight, bar))
            now = self.now()
            for delta in deltas:
                record = in_flight.get(delta.request_id)
                if record is None:  # e.g. the cancel notice of an aborted earlier run
                    continue
                record.add_chunk(now, len(delta.token_ids))
                if delta.finished:
                    record.end_s = now
                    del in_flight[delta.request_id]
                    bar.update(1)
            self._watch(self.engine.stats(), preemptions_at_start)

    def run(self, requests: Sequence[BenchRequest], phase: str) -> list[RequestRecord]:
        """Every request to completion; records in request order. An engine failure in step()
        propagates (the engine's state is unknown after it); a request the engine refuses is
        recorded with its error."""
        offsets = arrival_offsets(self.mode, len(requests), self.request_rate, self.seed)
        start = self.now()
        records = [
            RequestRecord(r.request_id, len(r.prompt_token_ids), start + offset)
            for r, offset in zip(requests, offsets, strict=True)
        ]
        pending = deque(zip(requests, records, strict=True))
        in_flight: dict[str, RequestRecord] = {}
        at_start = self.engine.stats()
        preemptions_at_start = at_start["num_preemptions"]
        self.engine_stats = {}
        with tqdm(
            total=len(requests), desc=f"direct:{phase}", unit="req", leave=False, disable=None
        ) as bar:
            try:
                self._loop(pending, in_flight, bar, preemptions_at_start)
            except BaseException:
                for request_id in in_flight:  # leave the engine empty for whoever goes next
                    self.engine.abort(request_id)
                raise
        at_end = self.engine.stats()
        steps = at_end["num_steps"] - at_start["num_steps"]
        self.engine_stats["num_steps"] = steps
        # below concurrency: requests reach the engine late, or slots wait for the next one
        self.engine_stats["seqs_per_step"] = (
            at_end["num_scheduled_seqs"] - at_start["num_scheduled_seqs"]
        ) / max(1, steps)
        # where the pacer settled: steps a launch, and the reserve it schedules the next at
        self.engine_stats["num_scheduler_steps"] = at_end["num_scheduler_steps"]
        self.engine_stats["num_reserve_steps"] = at_end["num_reserve_steps"]
        from pipeline.engine.core.engine_times import ms_per_launch, request_ms

        self.engine_stats |= ms_per_launch(at_end, at_start) | request_ms(at_end, at_start)
        log.debug("direct/%s: %d requests in %.2f s", phase, len(records), self.now() - start)
        return records
