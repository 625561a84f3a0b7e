"""The torch engine behind the `tensorrt_llm` python model: requests in, output chunks out.

Triton glue (tensors, response senders, metrics) stays in python_models/torch_llm.py; this part
runs without Triton. Every Triton request becomes one AsyncLLMEngine submission, so concurrent
requests share engine steps (in-flight batching) instead of queueing behind each other.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.engine import AsyncLLMEngine, LLMEngine
from pipeline.triton_repo.llm_request import LLMRequest, from_arrays


@dataclass(frozen=True, slots=True)
class OutputChunk:
    token_ids: np.ndarray  # [n] int32: new tokens when streaming, else the whole output
    is_final: bool


class OutputStream:
    """Iterate the chunks of one request; cancel() stops it in the engine."""

    def __init__(self, handle, request: LLMRequest):
        self.handle, self.request = handle, request

    def cancel(self) -> None:
        self.handle.cancel()

    def __iter__(self) -> Iterator[OutputChunk]:
        if self.request.is_streaming:  # TensorRT-LLM streams new tokens only, prompt or not
            for delta in self.handle:
                yield OutputChunk(np.asarray(delta.token_ids, np.int32), delta.finished)
            return
        tokens = [] if self.request.is_input_excluded else list(self.request.prompt_token_ids)
        for delta in self.handle:
            tokens.extend(delta.token_ids)
        yield OutputChunk(np.asarray(tokens, np.int32), True)


class LLMService:
    def __init__(
        self,
        engine_dir: Path,
        device: str,
        scheduler_policy: str,
        num_kv_blocks: int,
        enable_chunked_prefill: bool,
        exclude_input_in_output: bool,
    ):
        runtime = {
            "scheduler_policy": scheduler_policy,
            "enable_chunked_prefill": enable_chunked_prefill,
            "num_kv_blocks": num_kv_blocks or None,
        }
        self.engine = LLMEngine.from_engine_dir(engine_dir, device=device, **runtime)
        self.async_engine = AsyncLLMEngine(self.engine)
        self.exclude_input_in_output = exclude_input_in_output

    def generate(self, arrays: dict[str, np.ndarray]) -> OutputStream:
        """Submit now; ValueError for inputs the engine can never serve (limits, bad values)."""
        request = from_arrays(arrays, self.exclude_input_in_output)
        return OutputStream(
            self.async_engine.submit(request.prompt_token_ids, request.params), request
        )

    def stats(self) -> dict:
        """Engine counters (read from another thread: plain ints, a racy read is harmless)."""
        return self.engine.stats()

    def shutdown(self) -> None:
        self.async_engine.shutdown()
