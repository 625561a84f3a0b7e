"""A request whose prefix comes back from the host tier while another request decodes (a tiny
Llama on the CPU, overlap scheduling): it is admitted, waits a step for its blocks' copy, and
every request's greedy tokens equal those with caching off."""

import pytest

from pipeline.engine import LLMEngine, SamplingParams
from tests.integration.test_engine_parallel import tiny  # noqa: F401

SHARED = list(range(20, 52))  # 4 full 8-token blocks
PARAMS = SamplingParams(max_tokens=12, ignore_eos=True)


def run(path, num_steps: int, **runtime) -> tuple[dict[str, list[int]], dict]:
    engine = LLMEngine.from_engine_dir(
        path,
        device="cpu",
        num_kv_blocks=14,
        overlap_scheduling=True,
        num_scheduler_steps=num_steps,
        **runtime,
    )
    try:
        (first,) = engine.generate([SHARED + [3]], PARAMS)
        engine.generate([[9] * 40, [10] * 40], PARAMS)  # all 14 blocks: SHARED's to the host
        tokens = {"first": first.token_ids}
        names = {
            engine.add_request([11] * 20, SamplingParams(max_tokens=24, ignore_eos=True)): "long"
        }
        for _ in range(2):  # the long request is decoding when the shared prompt returns
            engine.step()
        names[engine.add_request(SHARED + [3], PARAMS)] = "again"
        while engine.has_unfinished():
            for delta in engine.step():
                tokens.setdefault(names[delta.request_id], []).extend(delta.token_ids)
        return tokens, engine.stats()
    finally:
        engine.close()


@pytest.mark.parametrize("num_steps", [1, 3], ids=["one-step", "multistep"])
def test_a_request_waiting_on_its_swap_in_gives_the_same_greedy_tokens(tiny, num_steps):  # noqa: F811
    root, _ = tiny
    path = root / "engine-tp1-pp1"
    expected, _ = run(path, num_steps, enable_prefix_caching=False)
    tokens, stats = run(path, num_steps, host_kv_cache_gb=0.001)
    assert tokens == expected
    assert tokens["again"] == tokens["first"]
    assert stats["num_host_hit_blocks"] == 4 and stats["num_offloaded_blocks"] >= 4
    assert stats["num_free_blocks"] == stats["num_total_blocks"]
