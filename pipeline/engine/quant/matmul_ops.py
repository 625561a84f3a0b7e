"""PyTorch's built-in low-precision matmuls, and a probe that tells whether one runs here.

The private aten ops (`torch._weight_int8pack_mm`, `torch._weight_int4pack_mm`, `torch._int_mm`,
`torch._scaled_mm`) differ by device, dtype and shape. Rather than encode each version's rules, a
module calls the op once at build time with its real weight; on failure it keeps the failure reason
in its `kernel` string and uses a dequantize + matmul path instead.
"""

import logging
from collections.abc import Callable

import torch

logger = logging.getLogger(__name__)

PADDED_MIN_ROWS = 32  # satisfies both "rows > 16" (_int_mm) and "rows % 16 == 0" style limits


def probe(name: str, call: Callable[[], torch.Tensor]) -> str | None:
    """None when `call` runs, else a one-line reason naming the op."""
    try:
        call()
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as err:
        reason = f"{name}: {str(err).strip().splitlines()[0][:160]}"
        logger.debug("op unavailable, falling back to dequantize+matmul: %s", reason)
        return reason
    return None


def rows_needed(num_rows: int, min_rows: int) -> int:
    """Row count to pad a matmul input to: itself, or a multiple of 16 of at least min_rows."""
    if min_rows == 1:
        return num_rows
    return max(min_rows, -(-num_rows // 16) * 16)


def probe_min_rows(name: str, call: Callable[[int], torch.Tensor]) -> tuple[int | None, str | None]:
    """(1, None) when the op takes any row count; (PADDED_MIN_ROWS, None) when it needs padding;
    (None, reason) when it does not run at all."""
    if probe(name, lambda: call(1)) is None:
        return 1, None
    reason = probe(name, lambda: call(PADDED_MIN_ROWS))
    return (None, reason) if reason else (PADDED_MIN_ROWS, None)


def pad_rows(x: torch.Tensor, min_rows: int) -> torch.Tensor:
    # [T, K] -> [T', K] with zero rows appended, T' = rows_needed(T, min_rows)
    target = rows_needed(x.shape[0], min_rows)
    if target == x.shape[0]:
        return x
    return torch.nn.functional.pad(x, (0, 0, 0, target - x.shape[0]))


def int4_inner_k_tiles(in_features: int) -> int | None:
    """tinygemm's innerKTiles: the largest of 8/4/2 with in_features % (tiles * 16) == 0."""
    for tiles in (8, 4, 2):
        if in_features % (tiles * 16) == 0:
            return tiles
    return None
