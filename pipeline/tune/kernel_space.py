"""One kernel at one shape class as a search space: launch configs on the problem's grid, the
gate (outputs against the reference, the config passed through the engine's own lookup) and the
CUDA-event timing of the wrapper's call."""

import torch

from pipeline.engine.kernels.tuned_configs import TUNED
from pipeline.specs.tune import KernelSearch
from pipeline.tune.kernel_items import KernelItem
from pipeline.tune.kernel_problems_attention import PagedDecodeAttention, VarlenAttention
from pipeline.tune.kernel_problems_linear import Int8Gemv, Int8MatmulDecode, Int8MatmulPrompt
from pipeline.tune.kernel_problems_pointwise import RmsNorm, RotaryStoreKv, SiluAndMul
from pipeline.tune.kernel_timer import KernelTimer
from pipeline.tune.search_space import Grid

PROBLEMS = {
    p.kernel: p
    for p in (
        RmsNorm,
        SiluAndMul,
        RotaryStoreKv,
        PagedDecodeAttention,
        VarlenAttention,
        Int8Gemv,
        Int8MatmulDecode,
        Int8MatmulPrompt,
    )
}


class KernelSpace:
    def __init__(
        self,
        item: KernelItem,
        device: torch.device,
        search: KernelSearch,
        timer: KernelTimer | None,
    ) -> None:
        self.item = item
        self.name = f"{item.kernel} [{item.label}]"
        self.problem = PROBLEMS[item.kernel](item, device, search.context_len)
        self.grid = Grid(self.problem.knobs(), self.problem.is_valid)
        self.device = device
        self.timer = timer

    def initial(self) -> tuple:
        return self.grid.initial()

    def neighbour(self, candidate, rng):
        return self.grid.neighbour(candidate, rng)

    def sample(self, rng):
        return self.grid.sample(rng)

    def describe(self, candidate) -> dict:
        return self.grid.describe(candidate)

    def _trying(self, candidate):
        return TUNED.trying(self.item.kernel, self.item.shape, self.describe(candidate))

    def check(self, candidate) -> str | None:
        with self._trying(candidate):
            outputs = self.problem.run()
        if self.device.type == "cuda":  # a kernel fault surfaces here, as this candidate's
            torch.cuda.synchronize(self.device)
        return self.problem.mismatch(outputs)

    def measure(self, candidate, repeats: int) -> list[float]:
        with self._trying(candidate):
            return self.timer.time_ms(self.problem.run, repeats)

    def autotune_list(self) -> list[tuple]:
        """The kernel's triton.autotune configs as candidates of this grid (none for kernels
        with constants: their default is the whole list)."""
        names = [k.name for k in self.grid.knobs]
        out = []
        for config in self.problem.autotune_list():
            candidate = tuple(config.get(n) for n in names)
            if None not in candidate and candidate not in out:
                out.append(candidate)
        return out
