"""W8A16 GEMV for batch-1 decode: y = x @ (q * scale).T on CUDA cores.

At one row each weight byte feeds one multiply-add, so the step is an HBM stream and tensor
cores would only pad rows (int8_matmul's tl.dot kernel pads to 16 and, to fill the GPU, splits K
into fp32 atomics that need a zero-fill and a cast kernel). Here the grid covers N, no split-K:
the tile is autotuned per (N, K) while the engine warms up its CUDA graphs, and per weight the
loop spends a byte extract, one LEA and one FMA. The int8 -> float converter runs at a quarter
of the FMA rate, so the weights skip it: q * 2^15 + bits(384.0) is the bit pattern of the float
384 + q, and the 384 * sum(x) that this adds is taken off once per output.

Tuned on the H100 for the 8B shapes: faster than the tl.dot path at one row, slower on every
shape at two, hence MAX_ROWS (python -m scripts.bench_linear_quant;
docs/perf/results/h100-engine-quantized/8b-linears-int8-gemv.md).
"""

import torch
import triton
import triton.language as tl

from pipeline.engine.kernels.tuned_configs import dtype_name, lookup

MAX_ROWS = 1  # more rows: int8_matmul's tl.dot kernel
_MAGIC = tl.constexpr(0x43C00000)  # bits of 384.0; + q * 2^15 gives 384 + q for q in [-128, 127]
_OFFSET = tl.constexpr(384.0)


@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def _w8a16_gemv_kernel(
    x_ptr,
    w_ptr,
    scale_ptr,
    out_ptr,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_om,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    # x [M, K]; w [N, K] int8; scale [N]; out [M, N]. One row of x a program (rows as a tensor
    # dimension gave 3D tiles that triton laid out one element a thread, through shared memory)
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offsets = tl.arange(0, BLOCK_K)
    x_row = x_ptr + row * stride_xm
    # columns past N read row N - 1 (no load masks); the store drops them
    w_rows = w_ptr + tl.minimum(cols, N - 1)[:, None] * stride_wn  # [BN, 1]
    # per-lane sums, reduced once after the loop: no cross-thread traffic inside it
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    x_sum = tl.zeros([1, BLOCK_K], tl.float32)
    for k in range(0, K, BLOCK_K):
        ks = (k + offsets)[None, :]  # [1, BK]
        if EVEN_K:
            x = tl.load(x_row + ks)
            q = tl.load(w_rows + ks)
        else:
            x = tl.load(x_row + ks, mask=ks < K, other=0.0)
            q = tl.load(w_rows + ks, mask=ks < K, other=0)
        x = x.to(tl.float32)  # [1, BK]
        w = (q.to(tl.int32) * 32768 + _MAGIC).to(tl.float32, bitcast=True)  # [BN, BK] 384 + q
        acc += x * w
        x_sum += x
    dots = tl.sum(acc, axis=1) - _OFFSET * tl.sum(x_sum, axis=1)  # [BN]
    scale = tl.load(scale_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    out = out_ptr + row * stride_om + cols
    tl.store(out, (dots * scale).to(out_ptr.dtype.element_ty), mask=cols < N)


def _config(block_n: int, block_k: int, warps: int) -> triton.Config:
    # num_stages is left alone: triton's pipeliner leaves this loop as it is (the SASS does not
    # change), so latency is hidden by programs in flight
    return triton.Config({"BLOCK_N": block_n, "BLOCK_K": block_k}, num_warps=warps)


# (BLOCK_N, BLOCK_K, warps): the fastest few of 37 tiles swept on the H100 for the 8B shapes
CONFIGS = [
    _config(*c)
    for c in [
        (2, 512, 2),
        (4, 512, 1),
        (4, 512, 2),
        (8, 512, 2),
        (8, 256, 2),
        (16, 256, 4),
        (2, 1024, 4),
        (16, 1024, 8),
    ]
]
INTERPRETER_CONFIG = {"BLOCK_N": 16, "BLOCK_K": 256}
MAX_ACC_REGS = 64  # fp32 accumulators a thread


def fits(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """Configs whose [BN, BK] accumulator fits MAX_ACC_REGS registers a thread."""

    def regs(c: triton.Config) -> int:
        return c.kwargs["BLOCK_N"] * c.kwargs["BLOCK_K"] // (32 * c.num_warps)

    return [c for c in configs if regs(c) <= MAX_ACC_REGS] or [min(configs, key=regs)]


def _bench(kernel_call, quantiles):
    # the default 25 + 100 ms per config and shape would add minutes to an 8B warm-up
    return triton.testing.do_bench(kernel_call, warmup=5, rep=20, quantiles=quantiles)


_tuned = triton.autotune(
    CONFIGS, key=["N", "K"], prune_configs_by={"early_config_prune": fits}, do_bench=_bench
)(_w8a16_gemv_kernel)


def w8a16_gemv(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    # x [M, K] fp16/bf16; weight [N, K] int8; scale [N] -> [M, N] in x.dtype
    num_rows, k = x.shape
    n = weight.shape[0]
    assert x.stride(1) == 1 and weight.stride(1) == 1
    out = torch.empty(num_rows, n, dtype=x.dtype, device=x.device)
    is_interpreted = x.device.type == "cpu"
    kernel, tuned = (_w8a16_gemv_kernel, INTERPRETER_CONFIG) if is_interpreted else (_tuned, {})
    if config := lookup("int8_gemv", (dtype_name(x), n, k)):  # `make tune` picked it
        kernel, tuned = _w8a16_gemv_kernel, config
    grid = lambda meta: (num_rows, triton.cdiv(n, meta["BLOCK_N"]))  # noqa: E731
    kernel[grid](
        x,
        weight,
        scale,
        out,
        n,
        k,
        x.stride(0),
        weight.stride(0),
        out.stride(0),
        **tuned,
    )
    return out
