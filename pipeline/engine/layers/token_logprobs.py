"""The log probabilities one launch's sampler computed, on their way to the host.

Each step's [S] values are copied to pinned host memory as soon as they exist, without waiting
(the next launch may be queued behind them already); the sequences read them once the launch's
tokens are on the host, which the same stream copied after them.
"""

import torch


class LaunchLogprobs:
    def __init__(self):
        self._steps: list[tuple[torch.Tensor, torch.cuda.Event | None]] = []
        self._values: list[list[float]] | None = None  # [steps][S] once read

    def add(self, values: torch.Tensor) -> None:
        # values [S] float32 on the device: the sampled tokens' log probabilities of one step
        if values.device.type != "cuda":
            self._steps.append((values, None))
            return
        host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
        host.copy_(values, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._steps.append((host, event))

    def row(self, row: int) -> list[float]:
        """Row `row`'s value at each step, in step order."""
        if self._values is None:
            for _, event in self._steps:
                if event is not None:
                    event.synchronize()
            self._values = [values.tolist() for values, _ in self._steps]
        return [values[row] for values in self._values]
