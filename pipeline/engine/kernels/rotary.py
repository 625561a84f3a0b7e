"""Rotary embedding, GPT-NeoX layout (rotate halves), in Triton: one program per token.

cos/sin are the engine's tables [max_pos, D] with the two halves repeated, in the model dtype;
products and sum are rounded to that dtype like reference.rotary_neox (and HF Llama).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(
    x_ptr,
    out_ptr,
    stride_xt,
    stride_xh,
    stride_ot,
    stride_oh,
    token,
    num_heads,
    c,
    s,
    HALF: tl.constexpr,
    HALF_PAD: tl.constexpr,
    HEADS: tl.constexpr,
):
    heads = tl.arange(0, HEADS)[:, None]
    cols = tl.arange(0, HALF_PAD)[None, :]
    mask = (heads < num_heads) & (cols < HALF)
    base = x_ptr + token * stride_xt + heads * stride_xh + cols
    x1 = tl.load(base, mask=mask, other=0.0)
    x2 = tl.load(base + HALF, mask=mask, other=0.0)
    dt = x1.dtype
    f1, f2 = x1.to(tl.float32), x2.to(tl.float32)
    # out1 = x1*cos - x2*sin, out2 = x2*cos + x1*sin, each product and the sum rounded to dt
    out1 = ((f1 * c).to(dt).to(tl.float32) - (f2 * s).to(dt).to(tl.float32)).to(dt)
    out2 = ((f2 * c).to(dt).to(tl.float32) + (f1 * s).to(dt).to(tl.float32)).to(dt)
    dest = out_ptr + token * stride_ot + heads * stride_oh + cols
    tl.store(dest, out1, mask=mask)
    tl.store(dest + HALF, out2, mask=mask)


@triton.jit
def _rotary_kernel(
    positions_ptr,
    q_ptr,
    k_ptr,
    cos_ptr,
    sin_ptr,
    q_out_ptr,
    k_out_ptr,
    num_q_heads,
    num_k_heads,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_qot,
    stride_qoh,
    stride_kot,
    stride_koh,
    stride_cos,
    HALF: tl.constexpr,
    HALF_PAD: tl.constexpr,
    Q_HEADS: tl.constexpr,
    K_HEADS: tl.constexpr,
):
    token = tl.program_id(0)
    pos = tl.load(positions_ptr + token)
    cols = tl.arange(0, HALF_PAD)[None, :]
    c = tl.load(cos_ptr + pos * stride_cos + cols, mask=cols < HALF).to(tl.float32)  # [1, HALF]
    s = tl.load(sin_ptr + pos * stride_cos + cols, mask=cols < HALF).to(tl.float32)
    _rotate_heads(
        q_ptr,
        q_out_ptr,
        stride_qt,
        stride_qh,
        stride_qot,
        stride_qoh,
        token,
        num_q_heads,
        c,
        s,
        HALF,
        HALF_PAD,
        Q_HEADS,
    )
    _rotate_heads(
        k_ptr,
        k_out_ptr,
        stride_kt,
        stride_kh,
        stride_kot,
        stride_koh,
        token,
        num_k_heads,
        c,
        s,
        HALF,
        HALF_PAD,
        K_HEADS,
    )


def rotary_neox(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    # positions [T]; q [T, H, D]; k [T, Hkv, D]; cos, sin [max_pos, D] -> (q_rot, k_rot)
    num_tokens, num_q_heads, head_dim = q.shape
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and cos.is_contiguous() and sin.is_contiguous()
    assert head_dim % 2 == 0
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    if num_tokens:
        _rotary_kernel[(num_tokens,)](
            positions,
            q,
            k,
            cos,
            sin,
            q_out,
            k_out,
            num_q_heads,
            k.shape[1],
            q.stride(0),
            q.stride(1),
            k.stride(0),
            k.stride(1),
            q_out.stride(0),
            q_out.stride(1),
            k_out.stride(0),
            k_out.stride(1),
            cos.stride(0),
            HALF=head_dim // 2,
            HALF_PAD=triton.next_power_of_2(head_dim // 2),
            Q_HEADS=triton.next_power_of_2(num_q_heads),
            K_HEADS=triton.next_power_of_2(k.shape[1]),
        )
    return q_out, k_out
