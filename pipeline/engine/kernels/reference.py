"""Plain-PyTorch twins of the Triton kernels: same signatures, same rounding points.

They define what each kernel must compute, mirror the engine's CPU layers (and HF's Llama), and
are what the kernel tests compare against.
"""

import torch
from torch.nn import functional as F


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # x [T, H], weight [H] -> [T, H]: normalize in fp32, round to x.dtype, then scale
    x32 = x.float()
    normed = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return weight * normed


def add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # x, residual [T, H] -> (rmsnorm(x + residual) [T, H], x + residual [T, H])
    summed = x + residual
    return rmsnorm(summed, weight, eps), summed


def rotary_neox(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    # positions [T]; q [T, H, D]; k [T, Hkv, D]; cos, sin [max_pos, D] (halves repeated, q.dtype)
    c = cos[positions].unsqueeze(1)  # [T, 1, D]
    s = sin[positions].unsqueeze(1)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        first, second = x.chunk(2, dim=-1)
        return x * c + torch.cat((-second, first), dim=-1) * s

    return rotate(q), rotate(k)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    # [T, 2I] (gate | up) -> [T, I]
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def store_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    # k, v [T, Hkv, D]; caches [NB, BS, Hkv, D]; slot_mapping [T] (block * BS + offset) -> in place
    k_cache.view(-1, *k.shape[1:]).index_copy_(0, slot_mapping.long(), k)
    v_cache.view(-1, *v.shape[1:]).index_copy_(0, slot_mapping.long(), v)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    # q [B, H, D]; caches [NB, BS, Hkv, D]; block_tables [B, M] int32; context_lens [B] int32
    # -> [B, H, D]: each sequence's one query attends to its first context_lens keys
    block_size = k_cache.shape[1]
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        ctx = int(context_lens[b])
        blocks = block_tables[b, : -(-ctx // block_size)].long()
        k = k_cache[blocks].flatten(0, 1)[:ctx].transpose(0, 1).float()  # [Hkv, ctx, D]
        v = v_cache[blocks].flatten(0, 1)[:ctx].transpose(0, 1).float()
        o = F.scaled_dot_product_attention(
            q[b].float().unsqueeze(1), k, v, scale=scale, enable_gqa=True
        )  # [H, 1, D]
        out[b] = o.squeeze(1).to(q.dtype)
    return out
