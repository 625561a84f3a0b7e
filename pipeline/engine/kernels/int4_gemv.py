"""W4A16 GEMV for batch-1 decode: y = (x * prequant) @ (q * scale per group).T on CUDA cores.

Weights come in quant.primitives.pack_int4_words' layout: [N, K/8] int32, blocks of 64 columns in
which nibble c of word j holds column 8c + j. So for each nibble position the x values a thread
needs are neighbours (vector loads), and a thread's loads of x serve every row it holds; the
checkpoint's own packing (two output rows a byte) made x a stride-4 gather, one scalar load per
weight word, and ran 0.8-1.5 TB/s. As in int8_gemv, nibbles skip the slow int -> float
converter: shifted to bits 16-19 and ORed with bits(128.0), u = q + 8 becomes the float 128 + u
(a shift and one LOP3 a weight), and 136 * sum(x) comes off once per block. A block never spans
two scale groups, so its scale multiplies each lane's partial sums once. AWQ's per-column
prequant scale multiplies x as it is loaded (no extra kernel before the GEMV).
"""

import torch
import triton
import triton.language as tl

from pipeline.engine.quant.primitives import INT4_WORD_BLOCK

MAX_ROWS = 1  # more rows: tinygemm (pipeline.engine.quant.int4_linear)
_BLOCK = tl.constexpr(INT4_WORD_BLOCK)
_MAGIC = tl.constexpr(0x43000000)  # bits(128.0): u at bits 16-19 -> 128 + u
_NIBBLE = tl.constexpr(0x000F0000)
_OFFSET = tl.constexpr(136.0)  # 128 + u = 136 + q


@triton.jit
def _nibble(words, shift: tl.constexpr):
    # the nibble at bit 16 - shift of each word, as the float 136 + q (arithmetic shifts are fine:
    # the mask drops whatever they shift in)
    if shift > 0:
        moved = words << shift
    elif shift < 0:
        moved = words >> (-shift)
    else:
        moved = words
    return ((moved & _NIBBLE) | _MAGIC).to(tl.float32, bitcast=True)


@triton.jit
def _w4a16_gemv_kernel(
    x_ptr,
    w_ptr,
    scale_ptr,
    pre_ptr,
    out_ptr,
    N,
    K,
    GROUP,
    stride_xm,
    stride_wn,
    stride_om,
    HAS_PRE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UNROLL: tl.constexpr,
):
    # x [M, K]; w [N, K/8] int32 (pack_int4_words); scale [K/GROUP, N] float32; pre [K];
    # out [M, N]. One row of x a program; a loop step takes UNROLL blocks of 64 columns
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # output columns = weight rows
    # rows past N read row N - 1 (no load masks); the store drops them
    live = tl.minimum(cols, N - 1)
    w_rows = w_ptr + live[:, None] * stride_wn  # [BN, 1]
    words = tl.arange(0, 8)
    x_row = x_ptr + row * stride_xm
    acc = tl.zeros([BLOCK_N, 8], tl.float32)  # per-lane sums, reduced once after the loop
    for k0 in range(0, K, _BLOCK * UNROLL):
        for u in tl.static_range(UNROLL):
            k = k0 + u * _BLOCK
            q = tl.load(w_rows + (k // 8 + words)[None, :])  # [BN, 8] int32
            scale = tl.load(scale_ptr + (k // GROUP) * N + live)[:, None]  # [BN, 1]
            partial = tl.zeros([BLOCK_N, 8], tl.float32)
            x_sum = tl.zeros([1, 8], tl.float32)
            for c in tl.static_range(8):
                ks = k + 8 * c + words  # the columns of nibble c: neighbours
                x = tl.load(x_row + ks).to(tl.float32)
                if HAS_PRE:
                    x = x * tl.load(pre_ptr + ks).to(tl.float32)
                x = x[None, :]  # [1, 8]
                partial += x * _nibble(q, 16 - 4 * c)
                x_sum += x
            acc += (partial - _OFFSET * x_sum) * scale
    out = out_ptr + row * stride_om + cols
    tl.store(out, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=cols < N)


def _config(block_n: int, unroll: int, warps: int) -> triton.Config:
    return triton.Config({"BLOCK_N": block_n, "UNROLL": unroll}, num_warps=warps)


CONFIGS = [
    _config(*c)
    for c in [
        (8, 8, 1),
        (16, 4, 1),
        (16, 8, 1),
        (32, 2, 1),
        (32, 4, 1),
        (32, 4, 2),
        (64, 2, 1),
        (64, 4, 2),
        (64, 2, 2),
        (128, 2, 4),
        (128, 4, 4),
        (32, 1, 1),
    ]
]
INTERPRETER_CONFIG = {"BLOCK_N": 16, "UNROLL": 1}
MAX_REGS = 96  # 32-bit registers a thread for sums, partials and the unrolled words


def _is_even(c: triton.Config, k: int, group: int) -> bool:
    # a block stays in one scale group and a loop step covers K evenly (no masks)
    return group % INT4_WORD_BLOCK == 0 and k % (INT4_WORD_BLOCK * c.kwargs["UNROLL"]) == 0


def fits(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """The even configs (_is_even) that fit MAX_REGS registers a thread."""
    even = [c for c in configs if _is_even(c, named_args["K"], named_args["GROUP"])]
    assert even, "int4_gemv: no config fits this shape (callers check supports())"

    def regs(c: triton.Config) -> int:
        tile = c.kwargs["BLOCK_N"] * 8 // (32 * c.num_warps)
        return (2 + c.kwargs["UNROLL"]) * tile

    return [c for c in even if regs(c) <= MAX_REGS] or [min(even, key=regs)]


def _bench(kernel_call, quantiles):
    # the default 25 + 100 ms per config and shape would add minutes to an 8B warm-up
    return triton.testing.do_bench(kernel_call, warmup=5, rep=20, quantiles=quantiles)


_tuned = triton.autotune(
    CONFIGS, key=["N", "K", "GROUP"], prune_configs_by={"early_config_prune": fits}, do_bench=_bench
)(_w4a16_gemv_kernel)


def supports(out_features: int, in_features: int, group: int) -> bool:
    """Shapes this kernel takes: K in whole 64-column blocks, each inside one scale group."""
    return any(_is_even(c, in_features, group) for c in CONFIGS)


def pack_scales(scale: torch.Tensor) -> torch.Tensor:
    # [N, K/group] -> [K/group, N] float32: one block's scales for neighbouring rows sit together
    return scale.float().t().contiguous()


def w4a16_gemv(
    x: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    prequant: torch.Tensor | None = None,
) -> torch.Tensor:
    # x [M, K] fp16/bf16; words [N, K/8] int32 (pack_int4_words); scales [K/group, N] float32
    # (pack_scales); prequant [K] or None -> [M, N] in x.dtype
    num_rows, k = x.shape
    n = words.shape[0]
    group = k // scales.shape[0]
    assert x.stride(1) == 1 and words.is_contiguous() and words.shape[1] * 8 == k
    out = torch.empty(num_rows, n, dtype=x.dtype, device=x.device)
    is_interpreted = x.device.type == "cpu"
    kernel, tuned = (_w4a16_gemv_kernel, INTERPRETER_CONFIG) if is_interpreted else (_tuned, {})
    grid = lambda meta: (num_rows, triton.cdiv(n, meta["BLOCK_N"]))  # noqa: E731
    kernel[grid](
        x,
        words,
        scales,
        x if prequant is None else prequant,
        out,
        n,
        k,
        group,
        x.stride(0),
        words.stride(0),
        out.stride(0),
        HAS_PRE=prequant is not None,
        **tuned,
    )
    return out
