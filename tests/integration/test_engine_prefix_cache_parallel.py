"""Prefix caching and its host tier on tensor- and pipeline-parallel engines (CPU, gloo): every
rank holds the block tables rank 0's scheduler ships and runs the host tier's copies it is sent,
so greedy tokens equal the one-rank engine's with caching off."""

import pytest

from pipeline.engine import LLMEngine, SamplingParams
from tests.integration.test_engine_parallel import TINY_BUILD, engine_dir, tiny  # noqa: F401

pytestmark = pytest.mark.slow

SHARED = list(range(20, 57))  # 4 full 8-token blocks and part of a fifth
WAVES = [
    [SHARED + [3, 4]],
    [SHARED + [5], SHARED + [6, 7, 8], [9] * 30],
    [[11] * 20, [12] * 20],  # evict the shared blocks (to the host tier)
    [SHARED + [3, 4], SHARED + [100, 101]],
]
RUNTIME = dict(
    num_kv_blocks=14,
    scheduler_policy="max_utilization",
    overlap_scheduling=True,
    num_scheduler_steps=3,
)


def waves_greedy(path, **runtime) -> tuple[list[list[int]], dict]:
    engine = LLMEngine.from_engine_dir(path, device="cpu", **RUNTIME, **runtime)
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    try:
        tokens = [o.token_ids for wave in WAVES for o in engine.generate(wave, params)]
        return tokens, engine.stats()
    finally:
        engine.close()


@pytest.mark.parametrize(("tp", "pp"), [(2, 1), (1, 2)])
def test_split_engine_with_prefix_caching_equals_one_rank_without(tiny, tp, pp):  # noqa: F811
    root, _ = tiny
    expected, _ = waves_greedy(root / "engine-tp1-pp1", enable_prefix_caching=False)
    path = engine_dir(root / "hf", root, TINY_BUILD, tp, pp)
    tokens, stats = waves_greedy(path, host_kv_cache_gb=0.001)
    assert tokens == expected
    assert stats["num_prefix_hit_tokens"] > 0
    assert stats["num_offloaded_blocks"] > 0 and stats["num_host_hit_blocks"] > 0
    assert stats["num_free_blocks"] == stats["num_total_blocks"]
