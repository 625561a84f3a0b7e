"""The engine in this process, streamed through AsyncLLMEngine: the "without the server" side of
the Triton-overhead ratio. Its runtime settings mirror what deploy gives the served engine."""

import gc
import logging
from collections.abc import Iterator
from pathlib import Path

from pipeline.bench.target import Chunk
from pipeline.bench.workload import BenchRequest

log = logging.getLogger(__name__)


def served_runtime(deploy, num_kv_blocks: int = 0) -> dict:
    """The runtime overrides the python-backend model applies (see triton_repo.llm_service), so
    direct and served engines schedule alike; num_kv_blocks > 0 overrides the deployed budget."""
    runtime = {"scheduler_policy": deploy.batch_scheduler_policy,
               "enable_chunked_prefill": deploy.torch.enable_chunked_prefill}
    kv_blocks = num_kv_blocks or deploy.torch.num_kv_blocks
    if kv_blocks:
        runtime["num_kv_blocks"] = kv_blocks
    return runtime


class DirectTarget:
    name = "direct"

    def __init__(self, engine_dir: Path, device: str, runtime: dict, num_threads: int = 0) -> None:
        import torch

        from pipeline.engine import AsyncLLMEngine, LLMEngine

        self._threads_before = torch.get_num_threads()
        if num_threads:
            torch.set_num_threads(num_threads)  # as the served model does (deploy.torch)
        self.engine = LLMEngine.from_engine_dir(engine_dir, device=device, **runtime)
        self.async_engine = AsyncLLMEngine(self.engine)
        log.debug("direct target: %s on %s, runtime %s", engine_dir, device, runtime)

    def stream(self, request: BenchRequest, temperature: float, seed: int) -> Iterator[Chunk]:
        from pipeline.engine import SamplingParams

        params = SamplingParams(max_tokens=request.max_tokens, temperature=temperature,
                                seed=seed if temperature > 0 else None,
                                ignore_eos=request.ignore_eos)
        for delta in self.async_engine.submit(list(request.prompt_token_ids), params):
            yield Chunk(len(delta.token_ids), token_ids=tuple(delta.token_ids))

    def close(self) -> None:
        """Free the engine (weights, KV cache) before anything else loads one."""
        import torch

        self.async_engine.shutdown()
        del self.async_engine, self.engine
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        torch.set_num_threads(self._threads_before)

    def __enter__(self) -> "DirectTarget":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
