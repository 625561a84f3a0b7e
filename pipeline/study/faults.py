"""Request faults a cell can run its accuracy probes under: the failure mode the study exists to
catch. Shin et al. report a fused-kernel mode that, to avoid running out of memory, capped the
tokens it generated at large batch sizes; its accuracy fell from 82% to 26% and nothing said so.
Truncation does the same on purpose, so the accuracy flag can be shown to fire."""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.request import SamplingParams

# (batch size, prompt ids, params) -> what the engine is given instead
RequestFault = Callable[[int, list[int], SamplingParams], tuple[list[int], SamplingParams]]


@dataclass(frozen=True, slots=True)
class Truncation:
    """From min_batch_size on, prompts keep only their last max_prompt_tokens and requests
    generate at most max_tokens (None: that part untouched)."""

    min_batch_size: int
    max_prompt_tokens: int | None = None
    max_tokens: int | None = None

    def __call__(
        self, batch_size: int, prompt: list[int], params: SamplingParams
    ) -> tuple[list[int], SamplingParams]:
        if batch_size < self.min_batch_size:
            return prompt, params
        if self.max_prompt_tokens is not None:
            prompt = prompt[-self.max_prompt_tokens :]
        if self.max_tokens is not None and params.max_tokens > self.max_tokens:
            params = dataclasses.replace(params, max_tokens=self.max_tokens)
        return prompt, params


def no_fault(
    batch_size: int, prompt: list[int], params: SamplingParams
) -> tuple[list[int], SamplingParams]:
    return prompt, params
