"""The paged decode and varlen (prompt) attention kernels as tuning problems, on a paged cache
with shuffled block ownership (fp8 codes when the item's KV dtype is fp8). Knobs: the decode
kernel's KV splits, the varlen kernel's query/key tiles, and both kernels' warps and stages."""

import torch

from pipeline.engine.kernels import reference
from pipeline.tune.kernel_problem import (
    ATTENTION_TOLERANCE,
    TRITON_DEFAULT_STAGES,
    TRITON_DEFAULT_WARPS,
    KernelProblem,
    close,
    knob,
)

FP8_KV_SCALE = 0.02
PROMPT_LEN = 512  # tokens of each fresh prompt in a varlen step


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


class _PagedAttention(KernelProblem):
    def build_cache(self, context_lens: list[int]) -> None:
        """K/V of each sequence's context in shuffled blocks; the block tables and lengths."""
        _, kv_dtype, _, kv_heads, head_dim, block_size, _ = self.item.shape
        self.kv_scale = FP8_KV_SCALE if kv_dtype.startswith("float8") else None
        per_seq = [-(-n // block_size) for n in context_lens]
        num_blocks = sum(per_seq) + 1
        order = torch.randperm(num_blocks, generator=self.generator).tolist()
        tables = torch.zeros(len(context_lens), max(per_seq), dtype=torch.int32)
        shape = (num_blocks, block_size, kv_heads, head_dim)
        self.k_cache = torch.zeros(shape, dtype=getattr(torch, kv_dtype), device=self.device)
        self.v_cache = torch.zeros_like(self.k_cache)
        for b, n in enumerate(context_lens):
            blocks = [order.pop() for _ in range(per_seq[b])]
            tables[b, : len(blocks)] = torch.tensor(blocks)
            table = torch.tensor(blocks, device=self.device)
            positions = torch.arange(n, device=self.device)
            slots = table[positions // block_size] * block_size + positions % block_size
            k, v = self.randn(n, kv_heads, head_dim), self.randn(n, kv_heads, head_dim)
            reference.store_kv(k, v, self.k_cache, self.v_cache, slots, self.kv_scale)
        self.tables = tables.to(self.device)
        self.context_lens = torch.tensor(context_lens, dtype=torch.int32, device=self.device)
        self.scale = head_dim**-0.5

    def mismatch(self, outputs) -> str | None:
        tol = ATTENTION_TOLERANCE[self.dtype]
        return close(outputs, self.expected, rtol=tol, atol=tol)


class PagedDecodeAttention(_PagedAttention):
    kernel = "paged_decode_attention"

    def setup(self) -> None:
        _, _, heads, _, head_dim, _, batch = self.item.shape
        self.build_cache([self.context_len] * batch)
        self.q = self.randn(batch, heads, head_dim)

    def args(self):
        return (self.q, self.k_cache, self.v_cache, self.tables, self.context_lens, self.scale)

    def run(self):
        from pipeline.engine.kernels import paged_attention

        return paged_attention.paged_decode_attention(*self.args(), self.kv_scale)

    def reference(self):
        return reference.paged_decode_attention(*self.args(), self.kv_scale)

    def knobs(self):
        from pipeline.engine.kernels.paged_attention import num_splits_for

        _, _, _, kv_heads, _, _, batch = self.item.shape
        max_blocks = self.tables.shape[1]
        splits = tuple(s for s in (1, 2, 4, 8, 16, 32, 64) if s <= max_blocks)
        return [
            knob("num_splits", splits, num_splits_for(batch, kv_heads, max_blocks)),
            knob("num_warps", (1, 2, 4, 8), TRITON_DEFAULT_WARPS),
            knob("num_stages", (1, 2, 3, 4), TRITON_DEFAULT_STAGES),
        ]


class VarlenAttention(_PagedAttention):
    kernel = "varlen_attention"

    def setup(self) -> None:
        _, _, heads, _, head_dim, _, tokens = self.item.shape
        lens = [PROMPT_LEN] * (tokens // PROMPT_LEN) + (
            [tokens % PROMPT_LEN] if tokens % PROMPT_LEN else []
        )
        self.build_cache(lens)  # fresh prompts: each attends to itself, causally
        self.q = self.randn(tokens, heads, head_dim)
        self.query_start = torch.tensor([0, *lens], device=self.device).cumsum(0).int()

    def run(self):
        from pipeline.engine.kernels import varlen_attention

        return varlen_attention.varlen_attention(
            self.q,
            self.k_cache,
            self.v_cache,
            self.tables,
            self.query_start,
            self.context_lens,
            self.scale,
            self.kv_scale,
        )

    def reference(self):
        # in float32, as the kernel test compares (fp8 codes are read as they are)
        k, v = self.k_cache, self.v_cache
        if self.kv_scale is None:
            k, v = k.float(), v.float()
        out = reference.varlen_attention(
            self.q.float(),
            k,
            v,
            self.tables,
            self.query_start,
            self.context_lens,
            self.scale,
            self.kv_scale,
        )
        return out

    def knobs(self):
        from pipeline.engine.kernels.varlen_attention import tile_shape

        _, _, heads, kv_heads, head_dim, _, _ = self.item.shape
        group = heads // kv_heads
        block_m = tile_shape(group)[0]
        smallest = max(16, _pow2(group))
        return [
            knob("BLOCK_M", tuple(m for m in (16, 32, 64, 128, 256) if m >= smallest), block_m),
            knob("BLOCK_N", (16, 32, 64, 128), 64 if head_dim <= 128 else 32),
            knob("num_warps", (2, 4, 8), TRITON_DEFAULT_WARPS),
            knob("num_stages", (1, 2, 3, 4), TRITON_DEFAULT_STAGES),
        ]
