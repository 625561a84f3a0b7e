"""One kernel at one shape class, as the tuner runs it: inputs built on the device (seeded), the
wrapper the engine calls, the PyTorch reference (pipeline/engine/kernels/reference.py or the
dequantized matmul) with the kernel's test tolerance, and the launch-config knobs to search,
wider than the kernel's constants or its triton.autotune list."""

from abc import ABC, abstractmethod

import torch

from pipeline.tune.kernel_items import KernelItem
from pipeline.tune.search_space import Knob

# the tolerances of tests/unit/engine/kernels (two 16-bit roundings)
POINTWISE_TOLERANCE = {
    torch.float16: {"rtol": 2**-9, "atol": 2**-10},
    torch.bfloat16: {"rtol": 2**-5, "atol": 2**-6},
    torch.float32: {"rtol": 1.3e-6, "atol": 1e-5},
}
ATTENTION_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}
TRITON_DEFAULT_WARPS, TRITON_DEFAULT_STAGES = 4, 3  # a launch that sets neither gets these


def close(actual, expected, **tolerance) -> str | None:
    """None when every output is within tolerance, else the first mismatch, summarized."""
    pairs = (
        zip(actual, expected, strict=True) if isinstance(actual, tuple) else [(actual, expected)]
    )
    for a, e in pairs:
        try:
            torch.testing.assert_close(a.float(), e.float(), **tolerance)
        except AssertionError as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            return "outputs differ from the reference: " + "; ".join(lines[:3])
    return None


def knob(name: str, values, default, extra=()) -> Knob:
    return Knob.with_default(name, (*values, *extra), default)


class KernelProblem(ABC):
    kernel = ""

    def __init__(self, item: KernelItem, device: torch.device, context_len: int) -> None:
        self.item = item
        self.device = device
        self.context_len = context_len
        self.dtype = getattr(torch, item.shape[0])
        self.generator = torch.Generator(device="cpu").manual_seed(0)
        self.setup()
        self.expected = self.reference()

    def randn(self, *shape: int, scale: float = 1.0) -> torch.Tensor:
        x = torch.randn(*shape, generator=self.generator) * scale
        return x.to(self.device, self.dtype)

    # what a kernel module supplies
    @abstractmethod
    def setup(self) -> None: ...

    @abstractmethod
    def run(self):
        """The engine's call of the kernel on the inputs (the tuned config comes through the
        wrapper's lookup)."""
        ...

    @abstractmethod
    def reference(self): ...

    def mismatch(self, outputs) -> str | None:
        return close(outputs, self.expected, **POINTWISE_TOLERANCE[self.dtype])

    @abstractmethod
    def knobs(self) -> list[Knob]: ...

    def is_valid(self, settings: dict) -> bool:
        return True

    def autotune_list(self) -> list[dict]:
        """The configs triton.autotune would try (none for a kernel with constants)."""
        return []


def config_of(triton_config) -> dict:
    """A triton.Config as the flat dict tuned_configs passes to a launch."""
    return {
        **triton_config.kwargs,
        "num_warps": triton_config.num_warps,
        "num_stages": triton_config.num_stages,
    }
