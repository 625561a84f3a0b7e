"""Rank 0 -> the other ranks: each launch's metadata, not pickled Python but two broadcasts over
the CPU (gloo) group: a fixed-size int64 header (command, micro-batch count, body length, each
micro-batch's step header) and the packed int64 body (step_inputs.py). The host sends; no GPU
waits on it, so rank 0 queues launch N+1 while N runs, and so do the others."""

import numpy as np
import torch
import torch.distributed as dist

from pipeline.engine.host_buffers import PinnedRing
from pipeline.engine.step_inputs import HEADER_LEN

LAUNCH, STOP, SCORE = 1, 2, 3  # SCORE: prompt logits (ModelRunner.prompt_logits)
_COMMAND, _NUM_BATCHES, _BODY_LEN = range(3)


class LaunchChannel:
    def __init__(self, group: dist.ProcessGroup, max_micro_batches: int, device: torch.device):
        self.group = group
        self.header = torch.zeros(3 + HEADER_LEN * max_micro_batches, dtype=torch.int64)
        self._ring = PinnedRing(1 << 16) if device.type == "cuda" else None

    def send(self, command: int, headers: list[np.ndarray], body: torch.Tensor | None) -> None:
        """Driver: body is the launch's packed host buffer (int64, len = the parts' sum)."""
        header = self.header.numpy()
        header[:] = 0
        header[:3] = command, len(headers), 0 if body is None else body.numel()
        for i, h in enumerate(headers):
            header[3 + i * HEADER_LEN : 3 + (i + 1) * HEADER_LEN] = h
        dist.broadcast(self.header, src=0, group=self.group)
        if body is not None and body.numel():
            dist.broadcast(body, src=0, group=self.group)

    def recv(self) -> tuple[int, list[np.ndarray], torch.Tensor | None]:
        """Others: (command, the micro-batches' headers, the body on the host)."""
        dist.broadcast(self.header, src=0, group=self.group)
        header = self.header.numpy().copy()
        num_batches, body_len = int(header[_NUM_BATCHES]), int(header[_BODY_LEN])
        headers = [
            header[3 + i * HEADER_LEN : 3 + (i + 1) * HEADER_LEN] for i in range(num_batches)
        ]
        body = None
        if body_len:
            body = (
                self._ring.take(body_len)
                if self._ring
                else torch.empty(body_len, dtype=torch.int64)
            )
            dist.broadcast(body, src=0, group=self.group)
        return int(header[_COMMAND]), headers, body

    def copied(self) -> None:
        """The body just received was queued for its copy to the device (its buffer's reuse
        waits for that copy)."""
        if self._ring:
            self._ring.copied()
