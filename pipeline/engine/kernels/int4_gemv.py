"""W4A16 GEMV for batch-1 decode: y = (x * prequant) @ (q * scale per group).T on CUDA cores.

It reads the checkpoint's own packing (int8 [N/2, K], two output rows per byte, low nibble = even
row) as int32 words of four columns, so the prompt path's dequantize and this kernel share one
copy of the weights. As in int8_gemv, nibbles skip the slow int -> float converter: shifted to
bits 16-19 and XORed with bits(128.0) | 8 << 16, a signed nibble q becomes the float 136 + q
(a shift and one LOP3 a weight), and 136 * sum(x) comes off once per group. A chunk of columns
never spans two scale groups, so a group's scale multiplies each lane's partial sums once.
AWQ's per-column prequant scale multiplies x as it is loaded (no extra kernel before the GEMV).
"""

import torch
import triton
import triton.language as tl

MAX_ROWS = 1  # more rows: tinygemm (pipeline.engine.quant.int4_linear)
_MAGIC = tl.constexpr(0x43080000)  # bits(128.0) ^ (8 << 16): nibble q at bits 16-19 -> 136 + q
_NIBBLE = tl.constexpr(0x000F0000)
_OFFSET = tl.constexpr(136.0)


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
    return ((moved & _NIBBLE) ^ _MAGIC).to(tl.float32, bitcast=True)


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
    stride_wr,
    stride_om,
    HAS_PRE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    SUB_K: tl.constexpr,
    UNROLL: tl.constexpr,
):
    # x [M, K]; w [N/2, K/4] int32 (byte c of word j in packed row r: rows 2r, 2r + 1 at column
    # 4j + c); scale [K/GROUP, N] float32; pre [K]; out [M, N]. One row of x a program; each
    # loop step takes UNROLL chunks of SUB_K columns (SUB_K divides GROUP: one scale a chunk)
    row = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)  # packed rows
    num_rows = N // 2
    # rows past N / 2 read the last one (no load masks); the store drops them
    live_rows = tl.minimum(rows, num_rows - 1)
    w_rows = w_ptr + live_rows[:, None] * stride_wr  # [BR, 1]
    words = tl.arange(0, SUB_K // 4)
    x_row = x_ptr + row * stride_xm
    # per-lane sums, reduced once after the loop: even rows (low nibbles), odd rows (high)
    acc_even = tl.zeros([BLOCK_R, SUB_K // 4], tl.float32)
    acc_odd = tl.zeros([BLOCK_R, SUB_K // 4], tl.float32)
    for k0 in range(0, K, SUB_K * UNROLL):
        for u in tl.static_range(UNROLL):
            k = k0 + u * SUB_K
            q = tl.load(w_rows + (k // 4 + words)[None, :])  # [BR, SK/4] int32
            scales = scale_ptr + (k // GROUP) * N + 2 * live_rows
            s_even = tl.load(scales)[:, None]
            s_odd = tl.load(scales + 1)[:, None]
            p_even = tl.zeros([BLOCK_R, SUB_K // 4], tl.float32)
            p_odd = tl.zeros([BLOCK_R, SUB_K // 4], tl.float32)
            x_sum = tl.zeros([1, SUB_K // 4], tl.float32)
            for c in tl.static_range(4):
                cols = k + 4 * words + c
                x = tl.load(x_row + cols).to(tl.float32)
                if HAS_PRE:
                    x = x * tl.load(pre_ptr + cols).to(tl.float32)
                x = x[None, :]  # [1, SK/4]
                p_even += x * _nibble(q, 16 - 8 * c)
                p_odd += x * _nibble(q, 12 - 8 * c)
                x_sum += x
            acc_even += (p_even - _OFFSET * x_sum) * s_even
            acc_odd += (p_odd - _OFFSET * x_sum) * s_odd
    out = out_ptr + row * stride_om + 2 * rows
    is_live = rows < num_rows
    dtype = out_ptr.dtype.element_ty
    tl.store(out, tl.sum(acc_even, axis=1).to(dtype), mask=is_live)
    tl.store(out + 1, tl.sum(acc_odd, axis=1).to(dtype), mask=is_live)


def _config(block_r: int, sub_k: int, unroll: int, warps: int) -> triton.Config:
    return triton.Config({"BLOCK_R": block_r, "SUB_K": sub_k, "UNROLL": unroll}, num_warps=warps)


CONFIGS = [
    _config(*c)
    for c in [
        (2, 128, 4, 1),
        (2, 128, 8, 2),
        (4, 128, 2, 1),
        (4, 128, 4, 2),
        (8, 128, 1, 2),
        (8, 128, 2, 2),
        (8, 128, 4, 4),
        (16, 128, 2, 4),
        (4, 64, 4, 1),
        (8, 64, 4, 2),
        (16, 64, 2, 2),
        (32, 64, 1, 4),
    ]
]
INTERPRETER_CONFIG = {"BLOCK_R": 4, "SUB_K": 32, "UNROLL": 2}
MAX_ACC_REGS = 32  # fp32 sums a thread


def _is_even(c: triton.Config, k: int, group: int) -> bool:
    # a chunk stays in one scale group and a loop step covers K evenly (no masks)
    sub_k = c.kwargs["SUB_K"]
    return group % sub_k == 0 and k % (sub_k * c.kwargs["UNROLL"]) == 0


def fits(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """The even configs (_is_even) whose sums fit MAX_ACC_REGS registers a thread."""
    even = [c for c in configs if _is_even(c, named_args["K"], named_args["GROUP"])]
    assert even, "int4_gemv: no config fits this shape (callers check supports())"

    def regs(c: triton.Config) -> int:  # [BR, SK/4] accumulators and partials, 2 of each
        return c.kwargs["BLOCK_R"] * c.kwargs["SUB_K"] // (32 * c.num_warps)

    return [c for c in even if regs(c) <= MAX_ACC_REGS] or [min(even, key=regs)]


def _bench(kernel_call, quantiles):
    # the default 25 + 100 ms per config and shape would add minutes to an 8B warm-up
    return triton.testing.do_bench(kernel_call, warmup=5, rep=20, quantiles=quantiles)


_tuned = triton.autotune(
    CONFIGS, key=["N", "K", "GROUP"], prune_configs_by={"early_config_prune": fits}, do_bench=_bench
)(_w4a16_gemv_kernel)


def supports(out_features: int, in_features: int, group: int) -> bool:
    """Shapes this kernel takes: pairs of rows, and K in whole chunks of one scale group."""
    return out_features % 2 == 0 and any(_is_even(c, in_features, group) for c in CONFIGS)


def pack_scales(scale: torch.Tensor) -> torch.Tensor:
    # [N, K/group] -> [K/group, N] float32: one chunk's scales for neighbouring rows sit together
    return scale.float().t().contiguous()


def w4a16_gemv(
    x: torch.Tensor,
    packed_rows: torch.Tensor,
    scales: torch.Tensor,
    prequant: torch.Tensor | None = None,
) -> torch.Tensor:
    # x [M, K] fp16/bf16; packed_rows [N/2, K] int8 (checkpoint layout); scales [K/group, N]
    # float32 (pack_scales); prequant [K] or None -> [M, N] in x.dtype
    num_rows, k = x.shape
    n = scales.shape[1]
    group = k // scales.shape[0]
    assert x.stride(1) == 1 and packed_rows.is_contiguous() and k % 4 == 0
    words = packed_rows.view(torch.int32)  # [N/2, K/4]
    out = torch.empty(num_rows, n, dtype=x.dtype, device=x.device)
    is_interpreted = x.device.type == "cpu"
    kernel, tuned = (_w4a16_gemv_kernel, INTERPRETER_CONFIG) if is_interpreted else (_tuned, {})
    grid = lambda meta: (num_rows, triton.cdiv(n // 2, meta["BLOCK_R"]))  # noqa: E731
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
