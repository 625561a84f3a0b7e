"""scripts.tune_kernels' comparison, cache reuse, engine copy and report, on synthetic spaces
(the kernel spaces need a GPU)."""

import json

from pipeline.engine.kernels import toolchain, tuned_configs
from pipeline.specs.tune import AnnealOptions
from pipeline.tune.kernel_items import KernelItem
from pipeline.tune.tuning_cache import TuningCache
from scripts.tune_kernels import cache_reuse, compare_strategies, engine_with_configs
from scripts.tune_kernels_report import markdown, write_outputs
from tests.unit.tune.synthetic_spaces import Bowl

ITEMS = [
    KernelItem("rmsnorm", ("bfloat16", 4096, 1), 1, "decode b1"),
    KernelItem("int8_gemv", ("bfloat16", 6144, 4096), 1, "qkv b1"),
]
OPTIONS = AnnealOptions(max_trials=25, repeats=2, max_seconds=1e9)


class ListedBowl(Bowl):
    def __init__(self, listed):
        super().__init__()
        self.listed = listed

    def autotune_list(self):
        return self.listed


def make_space(item):
    return ListedBowl([(1, 1), (20, 5)] if item.kernel == "int8_gemv" else [])


def test_strategies_run_at_the_same_budget_and_the_second_pass_measures_nothing(tmp_path):
    env = toolchain.environment()
    cache = TuningCache.open(tmp_path / "cache.json", env)
    rows = compare_strategies(
        ["anneal", "random", "autotune_list"], ITEMS, OPTIONS, cache, make_space
    )
    norm, gemv = rows["rmsnorm [decode b1]"], rows["int8_gemv [qkv b1]"]
    assert norm["anneal"]["num_trials"] == norm["random"]["num_trials"] == 25
    assert "note" in norm["autotune_list"]  # a kernel with constants has no list
    assert gemv["autotune_list"]["num_trials"] == 3  # the default, then its two configs
    assert gemv["autotune_list"]["tuned"] == {"x": 20, "y": 5}
    reuse = cache_reuse(ITEMS, OPTIONS, tmp_path / "cache.json")
    assert reuse == {"num_items": 2, "num_from_cache": 2, "num_trials": 0}

    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "config.json").write_text("{}")
    tuned, record = engine_with_configs(engine, ITEMS, tmp_path / "cache.json", tmp_path / "t")
    assert record["num_hits"] == 2 and (tuned / "config.json").is_symlink()
    assert json.loads((tuned / tuned_configs.ENGINE_FILE).read_text())["environment"] == env

    results = {
        "environment": env,
        "options": {"max_trials": 25, "repeats": 2},
        "strategies": rows,
        "cache_reuse": reuse,
    }
    write_outputs(results, tmp_path)
    text = markdown(results)
    assert "| rmsnorm [decode b1] |" in text and "| int8_gemv [qkv b1] |" in text
    assert "2 of 2 items from the cache, 0 trials" in text
    assert (tmp_path / "trace.png").stat().st_size > 10_000
