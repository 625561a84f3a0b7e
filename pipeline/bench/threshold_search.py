"""Sweep sizes upward until the first one fails; that size is the capacity threshold.

`run_one(size)` measures one size and returns its metrics. It signals a capacity failure it
observed (e.g. preemptions) by raising CapacityExceeded; any other exception is classified
(GPU out of memory, KV capacity, other) and recorded. Nothing raised by `run_one` escapes.
"""

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

log = logging.getLogger(__name__)

FAILURE_KINDS = ("oom", "kv_capacity", "batch_limit", "error")


class CapacityExceeded(Exception):
    def __init__(self, kind: str, detail: str, metrics: dict | None = None) -> None:
        assert kind in FAILURE_KINDS, kind
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.metrics = metrics or {}


@dataclass(slots=True)
class SizeResult:
    size: int
    is_ok: bool
    failure: str | None = None  # one of FAILURE_KINDS
    detail: str = ""
    metrics: dict = field(default_factory=dict)


@dataclass(slots=True)
class SweepResult:
    results: list[SizeResult]

    @property
    def threshold(self) -> SizeResult | None:
        """The first size that failed (None: every size fitted)."""
        return next((r for r in self.results if not r.is_ok), None)

    @property
    def max_ok_size(self) -> int | None:
        ok = [r.size for r in self.results if r.is_ok]
        return max(ok) if ok else None

    def to_dict(self) -> dict:
        threshold = self.threshold
        return {
            "results": [asdict(r) for r in self.results],
            "max_ok_size": self.max_ok_size,
            "threshold_size": threshold.size if threshold else None,
            "threshold_failure": threshold.failure if threshold else None,
            "threshold_detail": threshold.detail if threshold else None,
        }


def classify_failure(exc: BaseException) -> str:
    """GPU OOM (torch.cuda.OutOfMemoryError, or a server relaying CUDA's message), KV capacity
    (the engine refuses a request that can never fit its KV cache), else a plain error."""
    if isinstance(exc, CapacityExceeded):
        return exc.kind
    text = f"{type(exc).__name__}: {exc}".lower()
    if "outofmemory" in text or "out of memory" in text:
        return "oom"
    if "kv" in text and ("block" in text or "cache" in text):
        return "kv_capacity"
    return "error"


def find_threshold(
    sizes: Sequence[int],
    run_one: Callable[[int], dict],
    after_failure: Callable[[], None] = lambda: None,
    stop_at_first_failure: bool = True,
) -> SweepResult:
    results: list[SizeResult] = []
    for size in sorted(sizes):
        try:
            results.append(SizeResult(size, True, metrics=run_one(size)))
            log.info("sweep: size %d ok", size)
            continue
        except Exception as exc:  # the point of a sweep: a failing size is a result
            kind = classify_failure(exc)
            detail = (
                exc.detail
                if isinstance(exc, CapacityExceeded)
                else f"{type(exc).__name__}: {exc}"[:400]
            )
            metrics = exc.metrics if isinstance(exc, CapacityExceeded) else {}
            results.append(SizeResult(size, False, kind, detail, metrics))
            log.warning("sweep: size %d failed (%s): %s", size, kind, detail)
        after_failure()
        if stop_at_first_failure:
            break
    return SweepResult(results)
