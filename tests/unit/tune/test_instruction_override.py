"""The instruction space's toolchain path without a GPU: Triton compiles a kernel for sm_90 from
a reordered PTX file given as `ir_override`, and ptxas turns enough moves into other SASS.
Needs triton (ptxas and cuobjdump ship in its wheel); skips without it."""

import importlib.util
import os
import random

import pytest

from pipeline.tune.ptx_schedule import PtxKernel

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("triton") is None, reason="needs triton (its ptxas and cuobjdump)"
    ),
    pytest.mark.skipif(
        os.environ.get("TRITON_INTERPRET") == "1", reason="compiles for sm_90: not interpreted"
    ),
]


def decode_kernel_source():
    import triton.language as tl
    from triton.compiler import ASTSource

    from pipeline.engine.kernels import paged_attention

    fn = paged_attention._decode_kernel
    floats = {"q_ptr": "*bf16", "k_cache_ptr": "*bf16", "v_cache_ptr": "*bf16"}
    stats = {"out_ptr": "*fp32", "max_ptr": "*fp32", "sum_ptr": "*fp32"}
    signature = {}
    for name in fn.arg_names:
        if name.isupper():
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = floats.get(name) or stats.get(name) or "*i32"
        else:
            signature[name] = "fp32" if name in ("scale", "out_scale") else "i32"
    constants = {
        "BLOCK_SIZE": 32,
        "HEAD_DIM": 128,
        "GROUP_PAD": 16,
        "BLOCKS_PER_SPLIT": 4,
        "DOT_PRECISION": "ieee",
        "DOT_DTYPE": tl.bfloat16,
        "IS_SPLIT": True,
    }
    return ASTSource(fn, signature, constexprs=constants)


def test_a_reordered_ptx_file_is_what_triton_compiles_and_enough_moves_change_the_sass(tmp_path):
    import triton
    from triton.backends.compiler import GPUTarget

    from pipeline.tune.instruction_space import sass_digest

    target = GPUTarget("cuda", 90, 32)
    options = {"num_warps": 4, "num_stages": 3}
    original = triton.compile(decode_kernel_source(), target=target, options=options)
    kernel = PtxKernel(original.asm["ptx"])
    rng = random.Random(0)
    order = kernel.identity()
    for _ in range(200):
        order = kernel.random_move(order, rng) or order
    reordered = kernel.render(order)
    path = tmp_path / "schedule.ptx"
    path.write_text(reordered)
    rebuilt = triton.compile(
        decode_kernel_source(), target=target, options={**options, "ir_override": str(path)}
    )
    assert rebuilt.asm["ptx"] == reordered != original.asm["ptx"]
    assert rebuilt.metadata.name == original.metadata.name and rebuilt.asm["cubin"]
    assert sass_digest(original.asm["ptx"], "sm_90a") == sass_digest(original.asm["ptx"], "sm_90a")
    assert sass_digest(reordered, "sm_90a") != sass_digest(original.asm["ptx"], "sm_90a")
