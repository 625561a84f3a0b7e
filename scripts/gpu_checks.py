"""Correctness self-checks that scripts.bench_engine runs first on the benchmark's device:
each Triton kernel against its PyTorch twin, and each quantized linear format (synthetic
weights in modelopt's export layout) against its float32 reference, with the kernel it chose.
One device command then says both how fast and whether the GPU paths are right.
"""

import torch

from pipeline.engine import kernels
from pipeline.engine.kernels import reference
from pipeline.engine.layers.linear import build_linear
from pipeline.engine.quant.synthetic import QUANTIZATION, fused_reference, random_layer

LINEAR_TOLERANCE = 2e-2  # relative error, bf16 activations (see tests/unit/engine)


def _max_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return (actual.float() - expected.float()).abs().max().item()


def kernel_checks(device: torch.device, dtype: torch.dtype) -> dict:
    """Max |kernel - reference| per kernel, and whether it is within 2 rounding steps."""
    if not kernels.is_available(device):
        return {"skipped": f"no Triton kernels on {device}"}
    from pipeline.engine.kernels import activation, paged_attention, rmsnorm, rotary_kv_store

    g = torch.Generator(device=device).manual_seed(0)
    randn = lambda *shape: torch.randn(*shape, generator=g, device=device).to(dtype)  # noqa: E731
    x, res, w = randn(9, 4096), randn(9, 4096), randn(4096)
    angles = torch.rand(512, 64, generator=g, device=device).repeat(1, 2) * 6.28
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    k_cache = torch.zeros(40, 32, 8, 128, dtype=dtype, device=device)
    v_cache = torch.zeros_like(k_cache)
    ref_k, ref_v = k_cache.clone(), v_cache.clone()
    ctx = torch.tensor([1, 33, 300, 64], dtype=torch.int32, device=device)
    tables = torch.randperm(40, generator=g, device=device)[:40].view(4, 10).int()
    slots = torch.cat(
        [
            tables[b, : (-(-n // 32))].long().repeat_interleave(32) * 32
            + torch.arange(32, device=device).repeat(-(-n // 32))
            for b, n in enumerate(ctx.tolist())
        ]
    )
    new_q, new_k, new_v = (
        randn(len(slots), 32, 128),
        randn(len(slots), 8, 128),
        randn(len(slots), 8, 128),
    )
    new_pos = torch.arange(len(slots), device=device) * 7 % 512
    q_rot = rotary_kv_store.rotary_store_kv(
        new_pos, new_q, new_k, new_v, cos, sin, k_cache, v_cache, slots
    )
    ref_q, ref_new_k = reference.rotary_neox(new_pos, new_q, new_k, cos, sin)
    reference.store_kv(ref_new_k, new_v, ref_k, ref_v, slots)
    decode_q = randn(4, 32, 128)
    errors = {
        "rmsnorm": _max_err(rmsnorm.rmsnorm(x, w, 1e-5), reference.rmsnorm(x, w, 1e-5)),
        "add_rmsnorm": _max_err(
            rmsnorm.add_rmsnorm(x, res, w, 1e-5)[0], reference.add_rmsnorm(x, res, w, 1e-5)[0]
        ),
        "silu_and_mul": _max_err(activation.silu_and_mul(x), reference.silu_and_mul(x)),
        "rotary_store_kv": max(
            _max_err(q_rot, ref_q), _max_err(k_cache, ref_k), _max_err(v_cache, ref_v)
        ),
        "paged_decode_attention": _max_err(
            paged_attention.paged_decode_attention(decode_q, k_cache, v_cache, tables, ctx, 0.088),
            reference.paged_decode_attention(decode_q, ref_k, ref_v, tables, ctx, 0.088),
        ),
    }
    # rmsnorm/silu/attention values are O(1-10): two bf16 rounding steps of 10 is 0.16
    bound = 0.16 if dtype == torch.bfloat16 else 1e-2
    return {name: {"max_abs_err": err, "ok": err <= bound} for name, err in errors.items()}


def linear_checks(device: torch.device, dtype: torch.dtype) -> dict:
    """Per format: the kernel build_linear picked here and its relative error, 1 and 40 rows."""
    results = {}
    for algo, quantization in QUANTIZATION.items():
        prefixes = ["l.fc", "l.gate"]
        tensors = random_layer(algo, prefixes, [512, 512], in_features=1024)
        linear = build_linear(tensors, prefixes, quantization, dtype, device)
        errors = []
        for rows in (1, 40):
            x = torch.randn(rows, 1024, generator=torch.Generator().manual_seed(rows))
            expected = fused_reference(algo, tensors, prefixes, x)
            y = linear(x.to(device, dtype)).float().cpu()
            errors.append(((y - expected).norm() / expected.norm()).item())
        results[algo] = {
            "kernel": linear.kernel,
            "rel_err": max(errors),
            "ok": max(errors) < LINEAR_TOLERANCE,
        }
    return results


def gpu_checks(device: torch.device, dtype: torch.dtype) -> dict:
    return {"kernels": kernel_checks(device, dtype), "linears": linear_checks(device, dtype)}
