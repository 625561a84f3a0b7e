"""scripts.gpu_serving_bench without a GPU: dependency report, step plan, summary reading."""

import json

from scripts import gpu_serving_bench as script
from scripts.model_shapes import random_weights_dir


def test_missing_names_the_pip_package():
    assert script.missing({"json": "json", "no_such_module_xyz": "no-such-pkg"}) == {
        "no_such_module_xyz": "no-such-pkg"
    }
    assert script.missing({"no_such_parent.child": "x"}) == {"no_such_parent.child": "x"}


def test_without_server_packages_only_direct_steps_run():
    names = [(name, stage) for name, stage, extra, _ in script.steps(False, has_server=False)]
    assert ("sweep_server", "sweep") not in names
    for _, _, extra, _ in script.steps(False, has_server=False):
        assert not any(o.endswith("=both") or o.endswith("=server") for o in extra)
    assert any(name == "sweep_server" for name, *_ in script.steps(False, has_server=True))
    saturation = next(
        extra for name, _, extra, _ in script.steps(False, True) if name == "saturation"
    )
    assert "bench.trace_rate=8" in saturation  # the served path's hops in every GPU run


def test_key_numbers_reads_the_written_results(tmp_path):
    (tmp_path / "saturation").mkdir()
    (tmp_path / "saturation" / "bench.json").write_text(
        json.dumps(
            {
                "settings": {"input_len": 128},
                "targets": {
                    "server": {
                        "summary": {"ttft_ms_p50": 12.0, "output_tok_s": 900.0},
                        "served_path": {
                            "num_traced": 2,
                            "hops_ms": {"model_execute": {"mean": 4.5, "p50": 4.0, "p99": 6.0}},
                        },
                    }
                },
                "triton_vs_direct": {"output_tok_s_ratio": 0.93},
                "profile": {"summary": {"gpu0": {"mem_used_bytes_max": 7e10}, "bench": {}}},
            }
        )
    )
    (tmp_path / "sweep_small_kv").mkdir()
    (tmp_path / "sweep_small_kv" / "sweep.json").write_text(
        json.dumps({"max_ok_size": 8, "threshold_size": 16, "threshold_failure": "kv_capacity"})
    )
    keys = script.key_numbers(tmp_path, {"saturation": {"status": "ok"}})
    assert keys["saturation.server"]["ttft_ms_p50"] == 12.0
    assert keys["saturation.triton_vs_direct"]["output_tok_s_ratio"] == 0.93
    assert keys["saturation.gpu_peaks"] == {"gpu0": {"mem_used_bytes_max": 7e10}}
    assert keys["saturation.served_path"] == {"num_traced": 2, "model_execute": 4.5}
    assert keys["sweep_small_kv"]["threshold_size"] == 16
    assert "low_load.server" not in keys


def test_shape_of_builds_random_weights_with_the_tokenizer(tmp_path):
    from transformers import LlamaConfig

    shape = tmp_path / "shape"
    shape.mkdir()
    LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
    ).save_pretrained(shape)
    (shape / "tokenizer.json").write_text("{}")
    (shape / "model.safetensors").write_bytes(b"not weights")  # never copied
    out = random_weights_dir(shape, "float32", tmp_path / "random")
    config = json.loads((out / "config.json").read_text())
    assert (config["hidden_size"], config["num_key_value_heads"]) == (32, 2)
    assert (out / "tokenizer.json").read_text() == "{}"
    assert (out / "model.safetensors").stat().st_size > 1000  # the random weights
    assert random_weights_dir(shape, "float32", out) == out  # built once
