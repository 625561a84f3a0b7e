"""Norm, SwiGLU and rotary + KV-store kernels as tuning problems: one row (token) a program,
so the knobs are the warps (and SwiGLU's column block)."""

import torch

from pipeline.engine.kernels import reference
from pipeline.tune.kernel_problem import (
    POINTWISE_TOLERANCE,
    TRITON_DEFAULT_WARPS,
    KernelProblem,
    close,
    knob,
)

WARPS = (1, 2, 4, 8, 16, 32)
EPS = 1e-5


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


class RmsNorm(KernelProblem):
    kernel = "rmsnorm"

    def setup(self) -> None:
        _, hidden, rows = self.item.shape
        self.x, self.residual = self.randn(rows, hidden), self.randn(rows, hidden)
        self.weight = (torch.rand(hidden, generator=self.generator) + 0.5).to(
            self.device, self.dtype
        )

    def run(self):
        from pipeline.engine.kernels import rmsnorm

        return rmsnorm.add_rmsnorm(self.x, self.residual, self.weight, EPS)

    def reference(self):
        return reference.add_rmsnorm(self.x, self.residual, self.weight, EPS)

    def knobs(self):
        return [knob("num_warps", WARPS, TRITON_DEFAULT_WARPS)]


class SiluAndMul(KernelProblem):
    kernel = "silu_and_mul"

    def setup(self) -> None:
        _, inter, rows = self.item.shape
        self.inter = inter
        self.x = self.randn(rows, 2 * inter, scale=3.0)

    def run(self):
        from pipeline.engine.kernels import activation

        return activation.silu_and_mul(self.x)

    def reference(self):
        return reference.silu_and_mul(self.x)

    def knobs(self):
        top = _pow2(self.inter)
        blocks = tuple(b for b in (128, 256, 512, 1024, 2048, 4096, 8192) if b <= top) or (top,)
        return [
            knob("BLOCK", blocks, min(1024, top)),
            knob("num_warps", WARPS[:5], TRITON_DEFAULT_WARPS),
        ]

    def is_valid(self, settings: dict) -> bool:
        return settings["BLOCK"] >= 32 * settings["num_warps"]  # a thread holds >= 1 element


class RotaryStoreKv(KernelProblem):
    kernel = "rotary_store_kv"
    BLOCK_SIZE = 16

    def setup(self) -> None:
        _, heads, kv_heads, head_dim, tokens = self.item.shape
        max_pos = 2 * tokens + 1
        self.positions = torch.randperm(max_pos, generator=self.generator)[:tokens]
        self.positions = self.positions.to(self.device)
        self.q = self.randn(tokens, heads, head_dim)
        self.k, self.v = (
            self.randn(tokens, kv_heads, head_dim),
            self.randn(tokens, kv_heads, head_dim),
        )
        angles = torch.rand(max_pos, head_dim // 2, generator=self.generator) * 6.28
        self.cos = angles.cos().repeat(1, 2).to(self.device, self.dtype).contiguous()
        self.sin = angles.sin().repeat(1, 2).to(self.device, self.dtype).contiguous()
        num_blocks = -(-tokens // self.BLOCK_SIZE) + 1
        shape = (num_blocks, self.BLOCK_SIZE, kv_heads, head_dim)
        self.k_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.v_cache = torch.zeros_like(self.k_cache)
        self.slots = torch.randperm(num_blocks * self.BLOCK_SIZE, generator=self.generator)[:tokens]
        self.slots = self.slots.to(self.device)

    def run(self):
        from pipeline.engine.kernels import rotary_kv_store

        q = rotary_kv_store.rotary_store_kv(
            self.positions,
            self.q,
            self.k,
            self.v,
            self.cos,
            self.sin,
            self.k_cache,
            self.v_cache,
            self.slots,
        )
        flat = self.k_cache.view(-1, *self.k.shape[1:])
        return q, flat[self.slots], self.v_cache.view(-1, *self.v.shape[1:])[self.slots]

    def reference(self):
        q, k = reference.rotary_neox(self.positions, self.q, self.k, self.cos, self.sin)
        return q, k, self.v

    def mismatch(self, outputs) -> str | None:
        # 16-bit rotary sums cancel: one ulp of a large term is a large relative error
        wide = {"rtol": 2**-5, "atol": 2**-6}
        tolerance = POINTWISE_TOLERANCE[self.dtype] if self.dtype == torch.float32 else wide
        return close(outputs, self.expected, **tolerance)

    def knobs(self):
        return [knob("num_warps", WARPS[:5], TRITON_DEFAULT_WARPS)]
