"""Point-to-point traffic between pipeline stages: hidden states to the next stage, the last
stage's logits back to rank 0 (which samples).

Each direction has a process group of its own: NCCL gives each its own communicator and stream,
so a stage can send micro-batch m+1 forward while rank 0 waits for micro-batch m's logits coming
back (one shared stream would order those two and deadlock). Sends are asynchronous; the sent
tensor is a private copy (a CUDA graph's output buffer is overwritten by the next replay), and
the works are kept until the next launch. A receive makes this rank's stream wait for it.
"""

import torch
import torch.distributed as dist


class StageLink:
    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        dtype: torch.dtype,
        device: torch.device,
        prev: tuple[int, dist.ProcessGroup] | None,
        next_: tuple[int, dist.ProcessGroup] | None,
        logits: tuple[int, dist.ProcessGroup] | None,
    ):
        """prev / next_: (peer rank, group) of this rank's neighbours; logits: (peer, group)
        between the last stage's first rank and rank 0, on those two."""
        self.hidden_size, self.vocab_size = hidden_size, vocab_size
        self.dtype, self.device = dtype, device
        self.prev, self.next, self.logits = prev, next_, logits
        self._sends: list[dist.Work] = []

    def _send(self, t: torch.Tensor, to: tuple[int, dist.ProcessGroup]) -> None:
        """t: a tensor of this send's own (the caller copies)."""
        peer, group = to
        self._sends.append(dist.isend(t, peer, group=group))

    def _recv(self, t: torch.Tensor, frm: tuple[int, dist.ProcessGroup]) -> torch.Tensor:
        peer, group = frm
        dist.irecv(t, peer, group=group).wait()
        return t

    def send_hidden(self, hidden: torch.Tensor) -> None:
        # [T, 2, hidden]: the stage's output and residual
        self._send(hidden.clone(), self.next)

    def recv_hidden(self, num_rows: int) -> torch.Tensor:
        buf = torch.empty(num_rows, 2, self.hidden_size, dtype=self.dtype, device=self.device)
        return self._recv(buf, self.prev)

    def send_logits(self, logits: torch.Tensor) -> None:
        # [S, vocab] float32, sent in the model's dtype: the head computed them in it, so the
        # round trip is exact, and a decode step of 256 rows x 128k vocabulary sends 64 MiB, not
        # 128 (rank 0's receive kernel held its GPU for ~0.85 ms a micro-batch on 2x H200)
        self._send(logits.to(self.dtype, copy=True), self.logits)  # one copy, cast in it

    def recv_logits(self, num_rows: int) -> torch.Tensor:
        buf = torch.empty(num_rows, self.vocab_size, dtype=self.dtype, device=self.device)
        return self._recv(buf, self.logits).float()

    def settle(self) -> None:
        """Retire the sends of earlier launches (long done when the next launch starts)."""
        for work in self._sends:
            work.wait()
        self._sends.clear()
