"""What one launch's sampler keeps of each step's logits, on its way to the host.

Log probabilities are of the raw model distribution: log_softmax of the logits the model gave,
before logit biases, bans, penalties and temperature (vLLM's default `raw_logprobs`, the values
OpenAI's API documents); the sampled token's value, and with num_top > 0 the likeliest tokens',
are computed on the device in the launch, one [S, 1 + 2 * num_top] float32 tensor a step (ids
are exact in float32 below 2**24). Rows that asked for return_generation_logits also keep their
raw logits.

Each step's values are copied to pinned host memory as soon as they exist, without waiting (the
next launch may be queued behind them already); the sequences read them once the launch's
tokens are on the host, which the same stream copied after them.
"""

import numpy as np
import torch

from pipeline.request.outputs import TopLogprobs


def to_host(values: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
    if values.device.type != "cuda":
        return values, None
    host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
    host.copy_(values, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return host, event


class LaunchLogprobs:
    def __init__(self, num_top: int = 0, logits_rows: tuple[int, ...] = ()):
        """num_top: the most top alternatives any row asks for; logits_rows: the rows that keep
        their logits (return_generation_logits)."""
        self.num_top = num_top
        self.logits_rows = logits_rows
        self._logits_index: torch.Tensor | None = None
        self._steps: list[tuple[torch.Tensor, torch.cuda.Event | None]] = []
        self._logits: list[tuple[torch.Tensor, torch.cuda.Event | None]] = []
        self._values: list[np.ndarray] | None = None  # [steps] of [S, 1 + 2 * num_top] once read

    def add(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        # logits [S, V] float32, the model's (raw); tokens [S] int64 sampled from them
        logprobs = logits.log_softmax(dim=-1)
        parts = [logprobs.gather(1, tokens[:, None])]
        if self.num_top:
            values, ids = logprobs.topk(self.num_top, dim=-1)
            parts += [values, ids.to(torch.float32)]
        self._steps.append(to_host(torch.cat(parts, dim=1) if self.num_top else parts[0]))
        if self.logits_rows:
            if self._logits_index is None:
                self._logits_index = torch.tensor(self.logits_rows, device=logits.device)
            self._logits.append(to_host(logits.index_select(0, self._logits_index)))

    def _read(self) -> list[np.ndarray]:
        if self._values is None:
            for _, event in self._steps + self._logits:
                if event is not None:
                    event.synchronize()
            self._values = [values.numpy() for values, _ in self._steps]
        return self._values

    def row(self, row: int) -> list[float]:
        """Row `row`'s sampled token's log probability at each step, in step order."""
        return [float(values[row, 0]) for values in self._read()]

    def top_row(self, row: int, num_top: int) -> list[TopLogprobs]:
        """Row `row`'s num_top likeliest (token id, log probability) at each step."""
        n = self.num_top
        return [
            tuple(
                (int(token), float(value))
                for value, token in zip(
                    values[row, 1 : 1 + num_top], values[row, 1 + n : 1 + n + num_top], strict=True
                )
            )
            for values in self._read()
        ]

    def logits_row(self, row: int) -> np.ndarray:
        """Row `row`'s raw logits at each step: [steps, V] float32."""
        self._read()
        at = self.logits_rows.index(row)
        return np.stack([values[at].numpy() for values, _ in self._logits])
