"""The engine in this process: the "without the server" side of the Triton-overhead ratio. Its
runtime settings are the served engine's (triton_repo.engine_runtime); DirectDriver drives it."""

import gc
import logging
from pathlib import Path

from pipeline.bench.direct_driver import DirectDriver
from pipeline.engine.core.heap import freeze_loaded, thaw

log = logging.getLogger(__name__)


class DirectTarget:
    name = "direct"

    def __init__(self, engine_dir: Path, device: str, runtime: dict, num_threads: int = 0) -> None:
        import torch

        from pipeline.engine import LLMEngine

        self._threads_before = torch.get_num_threads()
        if num_threads:
            torch.set_num_threads(num_threads)  # as the served model does (deploy.torch)
        self.num_threads = torch.get_num_threads()  # CPU: compare with deploy.torch.num_threads
        self.engine = LLMEngine.from_engine_dir(engine_dir, device=device, **runtime)
        freeze_loaded()  # as the served engine process does: both sides of the ratio alike
        log.debug("direct target: %s on %s, runtime %s", engine_dir, device, runtime)

    def generator(self, bench, origin_s: float) -> DirectDriver:
        return DirectDriver(
            self.engine,
            bench.mode,
            bench.concurrency,
            bench.request_rate,
            bench.temperature,
            bench.seed,
            origin_s,
        )

    def close(self) -> None:
        """Free the engine (weights, KV cache) before anything else loads one."""
        import torch

        thaw()
        del self.engine
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        torch.set_num_threads(self._threads_before)
