"""Pinned host buffers reused step after step for the host <-> device copies of a step.

`tensor.pin_memory()` and `.to("cpu", non_blocking=True)` each take a pinned block from torch's
caching host allocator every step, a large share of a small model's host time a step (and the
host paces such steps). Here each step takes the next of a few buffers allocated once. A buffer
is written only after the copy that last used it is done: its event is waited on, which with
overlap scheduling (one step in flight) has passed long before.
"""

import torch

NUM_SLOTS = 3  # > the steps in flight at once (overlap scheduling: 2)


class PinnedRing:
    def __init__(self, capacity: int, dtype: torch.dtype = torch.int64):
        self.dtype = dtype
        self._buffers = [
            torch.empty(capacity, dtype=dtype, pin_memory=True) for _ in range(NUM_SLOTS)
        ]
        self._events = [torch.cuda.Event() for _ in range(NUM_SLOTS)]
        for event in self._events:  # done at once: the first take of each waits for nothing
            event.record()
        self._slot = 0

    def take(self, num: int) -> torch.Tensor:
        """The next buffer's first num elements, free to overwrite (grown if too small)."""
        self._slot = (self._slot + 1) % NUM_SLOTS
        slot = self._slot
        self._events[slot].synchronize()
        if self._buffers[slot].numel() < num:
            self._buffers[slot] = torch.empty(2 * num, dtype=self.dtype, pin_memory=True)
        return self._buffers[slot][:num]

    def copied(self) -> torch.cuda.Event:
        """Mark the copy just queued from (or into) the taken buffer; returns its event."""
        event = self._events[self._slot]
        event.record()
        return event
