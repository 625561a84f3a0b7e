"""W4A16 on tensor cores for decode-sized steps (int4_mma.cu): packing, NVRTC build, launch.

tinygemm (`torch._weight_int4pack_mm`) read the 8B shapes' int4 weights at 1.3-1.9 TB/s at one
row, and three Triton GEMVs at 0.4-1.5: a CUDA-core GEMV spends 2-5 instructions per weight on
dequantization and the multiply-add, about what the HBM stream leaves. Here the multiply-adds go
to mma.m16n8k16 with the activation rows as B's columns, and a lane dequantizes 8 weights in 11
instructions, so one kernel serves 1-64 rows at the weights' stream rate.

The kernel is CUDA C++ without headers, compiled once per device by NVRTC through PyTorch
(`torch.cuda._utils._nvrtc_compile`, private since 2.8: `unavailable()` names what is missing, and
the linear keeps tinygemm then). Each (N, K, row slices, group, pre-quant) shape is autotuned over
CANDIDATES at its first call outside a CUDA graph capture (the engine warms every graph up
eagerly first).
"""

import functools
from pathlib import Path

import torch

SOURCE = Path(__file__).with_suffix(".cu")
MAX_ROWS = 64  # 8 slices of 8 activation rows
SLICES = (1, 2, 4, 8)  # NB: activation rows / 8, rounded up to one of these
# (tiles a block, warps a block, 64-k blocks loaded a step) per slice count: the autotuner's
# picks on the H100 for the 8B shapes (scripts/bench_linear_quant.py) out of 33 that compile
# without spills. One slice wants more loads in flight (blocks, warps, a 2-block step). Each
# count keeps a 1-block step: group 64 allows no other
CANDIDATES = {
    1: ((1, 8, 2), (1, 16, 2), (2, 8, 2), (2, 16, 2), (4, 4, 1)),
    2: ((1, 4, 2), (2, 4, 2), (2, 8, 2), (2, 4, 1)),
    4: ((1, 4, 1), (1, 8, 1), (2, 4, 1)),
    8: ((1, 4, 1), (1, 8, 1)),
}
SHARED_MEMORY_BYTES = 48 * 1024
TUNE_REPEATS = 20
DEQUANTIZE_WARPS = 8


def configs(slices: int) -> list[tuple[int, int, int, int]]:
    return [(tiles, warps, slices, kb) for tiles, warps, kb in CANDIDATES[slices]]


def kernel_name(config: tuple[int, int, int, int]) -> str:
    return "w4a16_mma_{}_{}_{}_{}".format(*config)


def fits(out_features: int, in_features: int, group: int) -> str | None:
    """Why this kernel can't take the weight; None when it can."""
    if out_features % 16 or in_features % 64 or group % 64 or in_features % group:
        return (
            f"int4_mma needs out % 16 == 0, in % 64 == 0 and group % 64 == 0; got weight "
            f"({out_features}, {in_features}), group {group}"
        )
    return None


# lane = 4 r + j; word s; register i (row r + 8 (i % 2), k pair i // 2); half h (k + h); the
# nibble at 4 (i + 4 h) of word s holds W[row, 16 j + 4 s + 2 (i // 2) + h] (int4_mma.cu)
def _fragment_index() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lane, s, i, h = (
        t.flatten() for t in torch.meshgrid(*map(torch.arange, (32, 4, 4, 2)), indexing="ij")
    )
    rows = lane // 4 + 8 * (i % 2)
    cols = 16 * (lane % 4) + 4 * s + 2 * (i // 2) + h
    shifts = 4 * (i + 4 * h)
    return rows, cols, shifts


def pack(q: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [N, K] int in [-8, 7], scale [N, K / group] -> (words [N/16, K/64, 32, 4] int32,
    scales [N/16, K/group, 8] int32 of bf16 pairs), the kernel's layout."""
    n, k = q.shape
    tiles, blocks = n // 16, k // 64
    u = (q.to(torch.int32) + 8).reshape(tiles, 16, blocks, 64).permute(0, 2, 1, 3)
    rows, cols, shifts = (t.to(q.device) for t in _fragment_index())
    # int32 shifts wrap into the sign bit; the nibbles' bits are disjoint, so OR them
    nibbles = (u[:, :, rows, cols] << shifts.int()).reshape(tiles, blocks, 32, 4, 8)
    words = functools.reduce(torch.bitwise_or, nibbles.unbind(-1))
    bits = scale.to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF
    bits = bits.reshape(tiles, 16, -1).permute(0, 2, 1)  # [tiles, groups, 16]
    return words.contiguous(), (bits[..., :8] | bits[..., 8:] << 16).contiguous()


def _source(prequant: bool) -> str:
    instances = [f"W4A16_MMA({', '.join(map(str, c))})" for nb in SLICES for c in configs(nb)]
    return f"#define PREQUANT {int(prequant)}\n" + SOURCE.read_text() + "\n".join(instances) + "\n"


def _module(prequant: bool = False):
    # a module loads into one device's context
    return _device_module(torch.cuda.current_device(), prequant)


@functools.cache
def _device_module(device: int, prequant: bool):
    from torch.cuda._utils import _cuda_load_module, _nvrtc_compile

    ptx, _ = _nvrtc_compile(_source(prequant), kernel_name(configs(1)[0]))
    return _cuda_load_module(ptx)


def unavailable() -> str | None:
    """Why the kernel can't run on the current GPU (None: it can); compiles it once a device."""
    if not torch.cuda.is_available():
        return "int4_mma needs CUDA"
    return _unavailable(torch.cuda.current_device())


@functools.cache
def _unavailable(device: int) -> str | None:
    if torch.cuda.get_device_capability(device) < (8, 0):
        return "int4_mma needs bf16 mma (compute capability 8.0+)"
    try:
        _device_module(device, prequant=False)
    except (ImportError, AttributeError, RuntimeError, OSError) as err:
        return f"int4_mma: NVRTC build failed: {str(err).splitlines()[0][:160]}"
    return None


def _launch(config, x, words, scales, group, out, prequant=None) -> None:
    tiles, warps, _, _ = config
    num_tiles, blocks = words.shape[:2]
    getattr(_module(prequant is not None), kernel_name(config))(
        grid=((num_tiles + tiles - 1) // tiles, 1, 1),
        block=(32 * warps, 1, 1),
        args=[
            words,
            scales,
            x,
            x.stride(0),
            x.shape[0],
            x if prequant is None else prequant,  # a module without PREQUANT ignores it
            out,
            out.stride(0),
            num_tiles * 16,
            blocks * 64,
            group,
        ],
    )


_tuned: dict[tuple, tuple[int, int, int, int]] = {}


def _tune(x, words, scales, group, out, slices: int, prequant) -> tuple[int, int, int, int]:
    """The fastest config, timed in a CUDA graph (a launch from Python costs more host time than
    the kernel takes) with L2 flushed before each launch."""
    # written before each launch: in a step, weights come from HBM, not L2
    l2_bytes = torch.cuda.get_device_properties(x.device).L2_cache_size
    flush = torch.empty(2 * l2_bytes // 4, dtype=torch.int32, device=x.device)
    best, best_ms = None, float("inf")
    for config in configs(slices):
        if (group // 64) % config[3]:  # a step's blocks must end on a group's end
            continue
        _launch(config, x, words, scales, group, out, prequant)  # outside the graph: loads
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(TUNE_REPEATS):
                flush.zero_()
                _launch(config, x, words, scales, group, out, prequant)
        graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        if (ms := start.elapsed_time(end)) < best_ms:
            best, best_ms = config, ms
    return best


def matmul(
    x: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    group: int,
    prequant: torch.Tensor | None = None,
) -> torch.Tensor:
    """(x [M, K] bf16 (M <= MAX_ROWS) * prequant [K] bf16, rounded to bf16) @ the packed
    weight's transpose -> [M, N] bf16."""
    x = x.contiguous()
    num_rows = x.shape[0]
    if num_rows > MAX_ROWS:
        raise ValueError(f"int4_mma takes at most {MAX_ROWS} rows, got {num_rows}: dequantize")
    slices = next(nb for nb in SLICES if num_rows <= 8 * nb)
    out = torch.empty(num_rows, words.shape[0] * 16, dtype=torch.bfloat16, device=x.device)
    key = (out.shape[1], x.shape[1], slices, group, prequant is not None)
    config = _tuned.get(key)
    if config is None:
        if torch.cuda.is_current_stream_capturing():  # can't time now: one that always runs
            config = next(c for c in configs(slices) if c[3] == 1)
        else:
            config = _tuned[key] = _tune(x, words, scales, group, out, slices, prequant)
    _launch(config, x, words, scales, group, out, prequant)
    return out


def dequantize(words: torch.Tensor, scales: torch.Tensor, group: int) -> torch.Tensor:
    """The packed weight as bf16 [N, K] (q * bf16 scale), for one dense GEMM at many rows."""
    num_tiles, blocks = words.shape[:2]
    out = torch.empty(num_tiles * 16, blocks * 64, dtype=torch.bfloat16, device=words.device)
    units, warps = num_tiles * blocks, DEQUANTIZE_WARPS
    _module(prequant=False).w4_dequantize(
        grid=((units + warps - 1) // warps, 1, 1),
        block=(32 * warps, 1, 1),
        args=[words, scales, out, num_tiles * 16, blocks * 64, group],
    )
    return out


def tuned_configs() -> dict[str, str]:
    """The autotuned config per (N, K, slices, group, prequant), for bench reports."""
    return {"x".join(map(str, key)): kernel_name(config) for key, config in sorted(_tuned.items())}
