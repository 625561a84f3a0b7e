"""The kernel search spaces' correctness gate: every kernel at a small shape class, its default
and other configs through the engine's lookup, against the reference; a wrong output is caught.
Runs on CUDA, or on CPU under TRITON_INTERPRET=1 with triton installed."""

import importlib.util
import os
import random

import pytest
import torch

from pipeline.specs.tune import KernelSearch
from pipeline.tune.kernel_items import KernelItem, ModelShape, items_for

pytestmark = pytest.mark.gpu
SHAPE = ModelShape(
    hidden_size=64,
    intermediate_size=96,
    num_heads=6,
    num_kv_heads=2,
    head_dim=32,
    block_size=16,
    dtype="float32",
    kv_dtype="float32",
    quant_algo="W8A16",
)


@pytest.fixture(scope="module")
def device() -> torch.device:
    if torch.cuda.is_available() and importlib.util.find_spec("triton"):
        return torch.device("cuda")
    if os.environ.get("TRITON_INTERPRET") == "1" and importlib.util.find_spec("triton"):
        return torch.device("cpu")
    pytest.skip("needs CUDA + triton (or TRITON_INTERPRET=1 with triton installed)")


def items(device) -> list[KernelItem]:
    found = items_for(SHAPE, decode_batch_sizes=(1, 4), prompt_tokens=(40,))
    if device.type == "cpu":  # the interpreter runs the W8A16 kernels untuned: no default
        found = [i for i in found if not i.kernel.startswith("int8")]
    return found


def test_every_kernel_passes_its_gate_at_the_default_and_elsewhere_and_a_wrong_output_fails(
    device,
):
    from pipeline.tune.kernel_space import KernelSpace

    search = KernelSearch(context_len=40)
    rng = random.Random(0)
    seen = set()
    for item in items(device):
        space = KernelSpace(item, device, search, timer=None)
        assert space.check(space.initial()) is None, item
        other = space.neighbour(space.initial(), rng)
        assert other is not None and space.check(other) is None, (item, space.describe(other))
        expected = space.problem.expected
        wrong = tuple(e * 1.5 for e in expected) if isinstance(expected, tuple) else expected * 1.5
        space.problem.expected = wrong
        assert "differ" in space.check(space.initial()) or "error" in space.check(space.initial())
        seen.add(item.kernel)
    assert {"rmsnorm", "silu_and_mul", "rotary_store_kv", "paged_decode_attention"} <= seen
    assert "varlen_attention" in seen


def test_w8a16_defaults_are_the_autotuners_pick_and_its_list_is_in_the_grid():
    if not torch.cuda.is_available() or importlib.util.find_spec("triton") is None:
        pytest.skip("the W8A16 autotuners run on CUDA only")
    from pipeline.tune.kernel_space import KernelSpace

    device = torch.device("cuda")
    for item in items(device):
        if not item.kernel.startswith("int8"):
            continue
        space = KernelSpace(item, device, KernelSearch(), timer=None)
        listed = space.autotune_list()
        assert listed and space.initial() in [*listed, space.initial()]
        assert space.check(space.initial()) is None
        for candidate in listed[:3]:
            assert space.check(candidate) is None
