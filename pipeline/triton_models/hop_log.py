"""Where served streams' time goes inside the `tensorrt_llm` model: each stream's hops and each
response send's duration, kept for the last HOPS_KEPT, summarised as percentiles in ms."""

import collections
import time

import numpy as np

HOPS_KEPT = 1024
# summary names -> what each times, in ms. In this order: a stream's five hops (a row of
# add_stream), then one send (add_send)
HOPS = {
    "submit": "execute() took the request -> submitted to the engine (parse, tokenize)",
    "engine_first_token": "submit -> the first token back from the engine",
    "first_response_sent": "the first token back -> its response sent",
    "engine_final": "submit -> the final token back from the engine",
    "final_response_sent": "the final token back -> its response sent",
    "response_send": "one response send (a round trip to the server)",
}
HOP_STATS = {  # each hop's statistics, over the last HOPS_KEPT values
    "p50": lambda values: np.percentile(values, 50),
    "p99": lambda values: np.percentile(values, 99),
    "mean": np.mean,  # Little's law needs the mean
}


class HopLog:
    """Appended to by the service's lane threads (deque appends are atomic), summarised by the
    metrics thread."""

    def __init__(self):
        self._hops: collections.deque = collections.deque(maxlen=HOPS_KEPT)  # rows, in s
        self._sends: collections.deque = collections.deque(maxlen=HOPS_KEPT)  # in s
        self._num_timed = 0  # streams timed so far: the metrics poll recomputes only on news
        # (streams timed, perf_counter(), summary) when the summary was computed
        self._summary: tuple[int, float, dict[str, float]] = (0, 0.0, {})

    def add_send(self, seconds: float) -> None:
        self._sends.append(seconds)

    def add_stream(self, hops_s: tuple[float, float, float, float, float]) -> None:
        self._hops.append(hops_s)
        self._num_timed += 1  # a lost race between lanes still changes it

    def summary(self, max_age_s: float = 0.0) -> dict[str, float]:
        """HOPS x HOP_STATS in ms; a summary computed less than max_age_s ago is returned as it
        is (the percentiles hold the GIL for a while)."""
        num_timed, computed_at, summary = self._summary
        now = time.perf_counter()
        if num_timed == self._num_timed or now - computed_at < max_age_s:
            return summary
        num_timed, hops = self._num_timed, np.array(list(self._hops))
        columns = [*hops.T, np.array(list(self._sends))]
        out = {}
        for name, seconds in zip(HOPS, columns, strict=True):
            values = seconds * 1e3
            for stat, compute in HOP_STATS.items():
                out[f"{name}_ms_{stat}"] = float(compute(values))
        self._summary = (num_timed, now, out)
        return out
