"""Rank 0 -> the other ranks: each launch's metadata, not pickled Python but two broadcasts over
the CPU (gloo) group: a fixed-size int64 header (command, micro-batch count, body length, each
micro-batch's step header) and the packed int64 body (step_inputs.py). The host sends; no GPU
waits on it, so rank 0 queues launch N+1 while N runs, and so do the others."""

from typing import NamedTuple

import torch
import torch.distributed as dist

from pipeline.engine.execution.host_buffers import PinnedRing
from pipeline.engine.execution.step_types import HEADER_LEN, StepHeader

LAUNCH, STOP, SCORE = 1, 2, 3  # SCORE: prompt logits (ModelRunner.prompt_logits)
SWAP = 4  # the host tier's block copies ahead of a launch (execution/kv_swap.py)
LORA = 5  # the LoRA slot loads ahead of a launch (engine/lora/manager.py, take_loads)


class ChannelPrefix(NamedTuple):
    """The header's first fields, in order; each micro-batch's StepHeader follows."""

    command: int
    num_batches: int
    body_len: int


PREFIX_LEN = len(ChannelPrefix._fields)


class LaunchChannel:
    def __init__(self, group: dist.ProcessGroup, max_micro_batches: int, device: torch.device):
        self.group = group
        self.header = torch.zeros(PREFIX_LEN + HEADER_LEN * max_micro_batches, dtype=torch.int64)
        self._ring = PinnedRing(1 << 16) if device.type == "cuda" else None

    def send(self, command: int, headers: list[StepHeader], body: torch.Tensor | None) -> None:
        """Driver: body is the launch's packed host buffer (int64, len = the parts' sum)."""
        header = self.header.numpy()
        header[:] = 0
        header[:PREFIX_LEN] = ChannelPrefix(
            command, len(headers), 0 if body is None else body.numel()
        )
        fields = [field for h in headers for field in h]
        header[PREFIX_LEN : PREFIX_LEN + len(fields)] = fields
        dist.broadcast(self.header, src=0, group=self.group)
        if body is not None and body.numel():
            dist.broadcast(body, src=0, group=self.group)

    def recv(self) -> tuple[int, list[StepHeader], torch.Tensor | None]:
        """Others: (command, the micro-batches' headers, the body on the host)."""
        dist.broadcast(self.header, src=0, group=self.group)
        header = self.header.numpy()
        prefix = ChannelPrefix._make(header[:PREFIX_LEN].tolist())
        rows = header[PREFIX_LEN : PREFIX_LEN + prefix.num_batches * HEADER_LEN]
        headers = [StepHeader._make(row) for row in rows.reshape(-1, HEADER_LEN).tolist()]
        body_len, body = prefix.body_len, None
        if body_len:
            body = (
                self._ring.take(body_len)
                if self._ring
                else torch.empty(body_len, dtype=torch.int64)
            )
            dist.broadcast(body, src=0, group=self.group)
        return prefix.command, headers, body

    def copied(self) -> None:
        """The body just received was queued for its copy to the device (its buffer's reuse
        waits for that copy)."""
        if self._ring:
            self._ring.copied()
