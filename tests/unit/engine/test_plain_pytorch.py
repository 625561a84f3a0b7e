"""build.torch.triton_kernels=false: the model is built under kernels.plain_pytorch(), where no
layer loads a Triton kernel, and only while it is built."""

import importlib.util

from pipeline.engine import kernels

HAS_TRITON = importlib.util.find_spec("triton") is not None


def test_layers_built_plain_load_no_kernel_and_the_switch_ends_with_the_build():
    with kernels.plain_pytorch():
        assert kernels.load("rmsnorm", "cuda") is None
        with kernels.plain_pytorch(False):  # an inner build cannot turn them back on
            assert not kernels.is_available("cuda")
    assert kernels.is_available("cuda") == HAS_TRITON
    with kernels.plain_pytorch(False):
        assert kernels.is_available("cuda") == HAS_TRITON
