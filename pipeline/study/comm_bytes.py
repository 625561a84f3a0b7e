"""Payload bytes of the collectives rank 0 of a multi-rank engine runs, by kind: a count that does
not depend on the interconnect, so TP and PP compare on any host (gloo on the CPU too).

The counter wraps the methods of rank 0's TensorParallel, StageLink and LaunchChannel instances
(the model's layers call them through those instances). A collective captured in a CUDA graph
runs at each replay without a Python call, so an engine with graphs has its tensor-parallel
traffic undercounted: such counts are marked `is_complete: false` (the unfused cells, which run
eagerly, have them all). Counted per call: all-reduce, the message; all-gather, the gathered
result; broadcast / send / receive, the tensor. Other ranks' traffic mirrors rank 0's: every
rank of a TP group all-reduces the same messages; with two stages rank 0's sends and receives
are all the traffic between them.
"""

from collections import Counter
from collections.abc import Callable

import torch

KINDS = (
    "tp_all_reduce",
    "tp_all_gather",
    "tp_broadcast",
    "pp_send_hidden",
    "pp_recv_hidden",
    "pp_send_logits",
    "pp_recv_logits",
    "launch_metadata",
)
ACTIVATION_KINDS = ("tp_all_reduce", "pp_send_hidden", "pp_recv_hidden")


def _nbytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


class CollectiveBytes:
    def __init__(self, engine) -> None:
        runner = engine.model_runner
        self.counts: Counter = Counter()
        self.is_complete = runner.graphs is None or runner.tp.size == 1
        tp = runner.tp
        if tp.size > 1:
            self._wrap(tp, "all_reduce", "tp_all_reduce", lambda args, out: _nbytes(args[0]))
            self._wrap(tp, "all_gather", "tp_all_gather", lambda args, out: _nbytes(out))
            self._wrap(tp, "broadcast", "tp_broadcast", lambda args, out: _nbytes(out))
        link = runner.stage.link
        if link is not None:
            for name in ("send_hidden", "send_logits"):
                self._wrap(link, name, f"pp_{name}", lambda args, out: _nbytes(args[0]))
            for name in ("recv_hidden", "recv_logits"):
                self._wrap(link, name, f"pp_{name}", lambda args, out: _nbytes(out))
        if runner.ranks is not None:
            channel = runner.ranks.channel
            self._wrap(
                channel,
                "send",
                "launch_metadata",
                lambda args, out: _nbytes(channel.header) + _nbytes(args[2]),
            )

    def _wrap(self, obj, name: str, kind: str, size: Callable) -> None:
        method = getattr(obj, name)
        counts = self.counts

        def counted(*args, **kwargs):
            out = method(*args, **kwargs)
            counts[kind] += size(args, out)
            return out

        setattr(obj, name, counted)  # an instance attribute: shadows the class's method

    def snapshot(self) -> dict[str, int]:
        return {kind: self.counts[kind] for kind in KINDS}


def bytes_between(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {kind: after[kind] - before[kind] for kind in KINDS}


def per_token(delta: dict[str, int], num_tokens: int, is_complete: bool) -> dict:
    total = sum(delta.values())
    activations = sum(delta[k] for k in ACTIVATION_KINDS)
    return {
        "by_kind": delta,
        "total_bytes": total,
        "bytes_per_token": total / num_tokens if num_tokens else None,
        "activation_bytes_per_token": activations / num_tokens if num_tokens else None,
        "is_complete": is_complete,
    }
