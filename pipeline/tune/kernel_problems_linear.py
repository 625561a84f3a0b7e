"""The W8A16 kernels as tuning problems: the one-row GEMV (int8_gemv) and the tl.dot kernel's
decode (split-K) and prompt tilings (int8_matmul). Their default is what triton.autotune picks
from the kernel's own list for the shape; the search space is wider than that list and holds it.
Reference: x @ (q * scale).T in float32; tolerance: the kernel test's 1% relative L2 error."""

from abc import abstractmethod

import torch

from pipeline.tune.kernel_problem import KernelProblem, config_of, knob

REL_L2_TOLERANCE = 1e-2
MAX_ACC_REGS = 256  # GEMV fp32 accumulators a thread; int8_gemv.fits keeps 64 of them


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


class _Int8Linear(KernelProblem):
    def setup(self) -> None:
        n, k = self.item.shape[1], self.item.shape[2]
        self.q = torch.randint(-127, 128, (n, k), generator=self.generator, dtype=torch.int8)
        self.w_scale = torch.rand(n, generator=self.generator) / 100 + 1e-3
        self.x_cpu = torch.randn(self.item.rows, k, generator=self.generator)
        self.x = self.x_cpu.to(self.device, self.dtype)
        self.q, self.scale = self.q.to(self.device), self.w_scale.to(self.device, self.dtype)
        self.default = self._autotuned()

    def run(self):
        from pipeline.engine.kernels import int8_matmul

        return int8_matmul.w8a16_matmul(self.x, self.q, self.scale)

    def reference(self):
        x = self.x.float()
        return x @ (self.q.float() * self.scale.float()[:, None]).T

    def mismatch(self, outputs) -> str | None:
        rel = ((outputs.float() - self.expected).norm() / self.expected.norm()).item()
        if not rel < REL_L2_TOLERANCE:  # NaN fails too
            return f"relative L2 error {rel:.3g} > {REL_L2_TOLERANCE}"
        return None

    @abstractmethod
    def _autotuner(self): ...

    def _autotuned(self) -> dict:
        """The config triton.autotune picks for this shape (runs it once, untuned)."""
        self.run()
        return config_of(self._autotuner().best_config)

    def autotune_list(self) -> list[dict]:
        tuner = self._autotuner()
        configs = tuner.configs
        if tuner.early_config_prune is not None:
            named = {"N": self.item.shape[1], "K": self.item.shape[2]}
            configs = tuner.early_config_prune(configs, named)
        return [config_of(c) for c in configs]

    def _knobs(self, values: dict[str, tuple]) -> list:
        listed = self.autotune_list()
        return [
            knob(name, options, self.default[name], [c[name] for c in listed])
            for name, options in values.items()
        ]


class Int8Gemv(_Int8Linear):
    kernel = "int8_gemv"

    def _autotuner(self):
        from pipeline.engine.kernels import int8_gemv

        return int8_gemv._tuned

    def knobs(self):
        k = self.item.shape[2]
        return self._knobs(
            {
                "BLOCK_N": (1, 2, 4, 8, 16, 32, 64),
                "BLOCK_K": tuple(b for b in (64, 128, 256, 512, 1024, 2048) if b <= _pow2(k)),
                "num_warps": (1, 2, 4, 8, 16),
                "num_stages": (1, 2, 3),
            }
        )

    def is_valid(self, s: dict) -> bool:
        return s["BLOCK_N"] * s["BLOCK_K"] // (32 * s["num_warps"]) <= MAX_ACC_REGS


class Int8MatmulDecode(_Int8Linear):
    kernel = "int8_matmul_decode"

    def _autotuner(self):
        from pipeline.engine.kernels import int8_matmul

        return int8_matmul._decode

    def knobs(self):
        return self._knobs(
            {
                "BLOCK_N": (16, 32, 64, 128, 256),
                "BLOCK_K": (32, 64, 128, 256, 512),
                "SPLIT_K": (1, 2, 4, 8, 16, 32),
                "num_warps": (2, 4, 8),
                "num_stages": (2, 3, 4, 5),
            }
        )

    def is_valid(self, s: dict) -> bool:
        k = self.item.shape[2]
        return s["SPLIT_K"] <= -(-k // s["BLOCK_K"])  # no split without a K block


class Int8MatmulPrompt(_Int8Linear):
    kernel = "int8_matmul_prompt"

    def _autotuner(self):
        from pipeline.engine.kernels import int8_matmul

        return int8_matmul._prompt

    def _autotuned(self) -> dict:
        return {**super()._autotuned(), "BLOCK_M": 128}  # the wrapper's prompt tile rows

    def autotune_list(self) -> list[dict]:
        return [{**c, "BLOCK_M": 128} for c in super().autotune_list()]

    def knobs(self):
        return self._knobs(
            {
                "BLOCK_M": (64, 128),
                "BLOCK_N": (32, 64, 128, 256),
                "BLOCK_K": (32, 64, 128),
                "num_warps": (4, 8),
                "num_stages": (2, 3, 4, 5),
            }
        )
