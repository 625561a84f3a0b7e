"""The kernel tuning cache: atomic saves, environment key, per-kernel source invalidation, and
reuse (a second run measures nothing); the build's lookup into the engine dir."""

import dataclasses
import json
import os
import shutil

import pytest

from pipeline.engine.kernels import toolchain, tuned_configs
from pipeline.specs.tune import AnnealOptions
from pipeline.tune import tuning_cache
from pipeline.tune.engine_configs import EngineConfigs
from pipeline.tune.kernel_items import KernelItem
from pipeline.tune.kernel_tuning import tune_items
from pipeline.tune.tuning_cache import CacheEntry, TuningCache, TuningCacheMismatch
from tests.unit.tune.synthetic_spaces import Bowl

H100 = {
    "gpu": "NVIDIA H100 80GB HBM3",
    "driver": "580.95.05",
    "cuda": "13.0",
    "triton": "3.6.0",
    "torch": "2.11.0+cu130",
}
ITEMS = [
    KernelItem("rmsnorm", ("bfloat16", 4096, 8), 8, "decode b8"),
    KernelItem("varlen_attention", ("bfloat16", "bfloat16", 32, 8, 128, 32, 512), 512, "512 tok"),
]
OPTIONS = AnnealOptions(max_trials=30, repeats=2, max_seconds=1e9)


def entry(kernel="rmsnorm", shape="bfloat16,4096,8", source_hash="aaaa") -> CacheEntry:
    return CacheEntry(
        kernel, shape, source_hash, {"num_warps": 8}, {"num_warps": 4}, 2.0, 1.0, "anneal", 9
    )


def test_save_is_atomic_the_old_file_survives_a_failed_write(tmp_path, monkeypatch):
    path = tmp_path / "cache.json"
    cache = TuningCache(path, H100, {})
    cache.put(entry())
    cache.save()
    before = path.read_text()
    cache.put(entry(shape="bfloat16,4096,64"))

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(tuning_cache.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        cache.save()
    assert path.read_text() == before  # whole, and the old one
    assert os.listdir(tmp_path) == ["cache.json"]  # no temp file left behind
    monkeypatch.undo()
    cache.save()
    assert len(json.loads(path.read_text())["entries"]) == 2


def test_a_cache_from_another_environment_is_refused_naming_what_differs(tmp_path):
    path = tmp_path / "cache.json"
    cache = TuningCache(path, H100, {})
    cache.put(entry())
    cache.save()
    a100 = {**H100, "gpu": "NVIDIA A100-SXM4-80GB", "triton": "3.5.1"}
    with pytest.raises(TuningCacheMismatch) as err:
        TuningCache.open(path, a100)
    message = str(err.value)
    assert "'NVIDIA H100 80GB HBM3' -> 'NVIDIA A100-SXM4-80GB'" in message
    assert "triton: '3.5.1'" not in message and "'3.6.0' -> '3.5.1'" in message
    assert "driver" not in message and "tune.kernels.cache_path" in message
    assert TuningCache.open(path, a100, replace=True).entries == {}
    assert TuningCache.open(path, H100).get("rmsnorm", "bfloat16,4096,8", "aaaa") is not None


def test_not_a_cache_file_is_named(tmp_path):
    path = tmp_path / "cache.json"
    path.write_text("[1, 2]")
    with pytest.raises(Exception, match="is not a kernel tuning cache"):
        TuningCache.open(path, H100)


def kernel_tree_copy(tmp_path, monkeypatch):
    """The kernel sources copied where a test may edit them; toolchain hashes the copy."""
    tree = tmp_path / "kernels"
    shutil.copytree(toolchain.KERNEL_DIR, tree, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(toolchain, "KERNEL_DIR", tree)
    return tree


def test_second_run_measures_nothing_and_a_source_edit_retunes_only_that_kernel(
    tmp_path, monkeypatch
):
    tree = kernel_tree_copy(tmp_path, monkeypatch)
    measured = []

    def make_space(item):
        measured.append(item.kernel)
        return Bowl()

    path = tmp_path / "cache.json"
    first = tune_items(ITEMS, TuningCache.open(path, H100), make_space, OPTIONS)
    assert measured == ["rmsnorm", "varlen_attention"]
    assert all(r.search is not None and len(r.search.trials) == 30 for r in first)

    measured.clear()  # same GPU, same sources: every item from the cache
    second = tune_items(ITEMS, TuningCache.open(path, H100), make_space, OPTIONS)
    assert measured == [] and all(r.cached is not None for r in second)
    assert [r.to_dict()["num_trials"] for r in second] == [0, 0]
    assert second[0].to_dict()["tuned"] == first[0].search.tuned

    varlen_hash = toolchain.source_hash("varlen_attention")
    rmsnorm = tree / "rmsnorm.py"
    rmsnorm.write_text(rmsnorm.read_text() + "\n# edited\n")
    assert toolchain.source_hash("varlen_attention") == varlen_hash
    third = tune_items(ITEMS, TuningCache.open(path, H100), make_space, OPTIONS)
    assert measured == ["rmsnorm"]
    assert third[0].search is not None and third[1].cached is not None


def test_build_lookup_records_hits_and_misses_and_writes_the_engine_file(tmp_path, monkeypatch):
    tree = kernel_tree_copy(tmp_path, monkeypatch)
    path = tmp_path / "cache.json"
    tune_items(ITEMS[:1], TuningCache.open(path, H100), lambda item: Bowl(), OPTIONS)
    lookup = EngineConfigs(path, ITEMS, H100)
    engine_dir = tmp_path / "engine"
    engine_dir.mkdir()
    record = lookup.write(engine_dir)
    assert record["num_hits"] == 1 and record["num_misses"] == 1
    assert record["missed"] == ["varlen_attention[bfloat16,bfloat16,32,8,128,32,512]"]
    written = json.loads((engine_dir / tuned_configs.ENGINE_FILE).read_text())
    assert written["environment"] == H100 and written["entries"][0]["kernel"] == "rmsnorm"
    digest = lookup.digest()
    (tree / "rmsnorm.py").write_text("# another kernel\n")
    edited = EngineConfigs(path, ITEMS, H100)
    assert edited.digest() is None and len(edited.missed) == 2  # a new build, on defaults
    elsewhere = EngineConfigs(path, ITEMS, {**H100, "driver": "590.1"})
    assert elsewhere.status.startswith("refused") and elsewhere.digest() is None
    assert digest is not None


def test_engine_installs_its_configs_and_refuses_another_environments(tmp_path, monkeypatch):
    here = toolchain.environment()
    engine_dir = tmp_path / "engine"
    engine_dir.mkdir()
    current = toolchain.source_hash("rmsnorm")
    entries = [
        {
            "kernel": "rmsnorm",
            "shape": "bfloat16,576,8",
            "source_hash": current,
            "config": {"num_warps": 2},
        },
        {
            "kernel": "rmsnorm",
            "shape": "bfloat16,576,64",
            "source_hash": "old",
            "config": {"num_warps": 8},
        },
    ]
    file = engine_dir / tuned_configs.ENGINE_FILE
    file.write_text(json.dumps({"environment": here, "entries": entries}))
    status = tuned_configs.install_engine_configs(engine_dir)
    assert status == {"status": "installed", "num_configs": 1, "num_stale": 1}
    assert tuned_configs.lookup("rmsnorm", ("bfloat16", 576, 8)) == {"num_warps": 2}
    assert tuned_configs.lookup("rmsnorm", ("bfloat16", 576, 64)) is None  # stale source
    with tuned_configs.TUNED.trying("rmsnorm", ("bfloat16", 576, 8), {"num_warps": 16}):
        assert tuned_configs.lookup("rmsnorm", ("bfloat16", 576, 8)) == {"num_warps": 16}
    assert tuned_configs.lookup("rmsnorm", ("bfloat16", 576, 8)) == {"num_warps": 2}

    file.write_text(json.dumps({"environment": {**here, "gpu": "other"}, "entries": entries}))
    status = tuned_configs.install_engine_configs(engine_dir)
    assert status["status"] == "refused" and len(tuned_configs.TUNED) == 0
    file.unlink()
    assert tuned_configs.install_engine_configs(engine_dir) == {"status": "none"}


def test_item_results_report_default_tuned_and_counts(tmp_path):
    results = tune_items(
        ITEMS[:1], TuningCache.open(tmp_path / "c.json", H100), lambda i: Bowl(), OPTIONS
    )
    row = results[0].to_dict()
    assert row["default"] == {"x": 0, "y": 0} and row["tuned_ms"] < row["default_ms"]
    assert row["num_trials"] == 30 and row["num_accepted"] >= 1
    assert dataclasses.asdict(results[0].item)["kernel"] == "rmsnorm"
