"""The multi-GPU bench's per-GPU utilisation, from pipeline.profiler's samples."""

from types import SimpleNamespace

import torch

from scripts.gpu_activity import gpu_sampler, util_means


def test_util_means_per_gpu_in_index_order():
    samples = [
        {"t_s": 0.0, "gpu0": {"util_pct": 90.0}, "gpu1": {"util_pct": 10.0}},
        {"t_s": 0.1, "gpu0": {"util_pct": 100.0}, "gpu1": {"util_pct": 30.0}},
    ]
    assert util_means(SimpleNamespace(samples=samples)) == [95.0, 20.0]


def test_no_sampler_on_the_cpu():
    assert gpu_sampler(torch.device("cpu")) is None
    assert util_means(None) is None
