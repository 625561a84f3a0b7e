import json

import pytest

from pipeline.bench.baseline import (
    MetricRule,
    build_baseline,
    hardware_key,
    read_baseline,
    write_baseline,
)
from pipeline.errors import ArtifactError

DEFAULTS = {
    "server.output_tok_s": MetricRule("relative", 0.5, "higher"),
    "accuracy.ppl": MetricRule("absolute", 0.05, "lower"),
}


def test_round_trip_keeps_stored_tolerances(tmp_path):
    path = tmp_path / "b.json"
    first = build_baseline(
        "m-torch-cpu",
        "m",
        "torch",
        "cpu",
        {"input_len": 8},
        {"server.output_tok_s": 10.0, "accuracy.ppl": 12.5},
        DEFAULTS,
        None,
        {},
    )
    write_baseline(path, first)
    stored = read_baseline(path)
    stored["metrics"]["accuracy.ppl"]["tolerance"] = 0.2  # hand-tuned in the file
    second = build_baseline(
        "m-torch-cpu",
        "m",
        "torch",
        "cpu",
        {"input_len": 8},
        {"server.output_tok_s": 11.0, "accuracy.ppl": 12.4},
        DEFAULTS,
        stored,
        {},
    )
    assert second["metrics"]["accuracy.ppl"] == {
        "value": 12.4,
        "kind": "absolute",
        "tolerance": 0.2,
        "better": "lower",
    }
    assert second["metrics"]["server.output_tok_s"]["tolerance"] == 0.5


def test_missing_and_malformed_baselines_give_clear_errors(tmp_path):
    with pytest.raises(ArtifactError, match="make update-baseline"):
        read_baseline(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        read_baseline(bad)
    bad.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "workload": {},
                "metrics": {"x": {"value": 1, "kind": "fuzzy", "tolerance": -1}},
            }
        )
    )
    with pytest.raises(ArtifactError, match=r"metrics\.x: kind='fuzzy'.*tolerance=-1"):
        read_baseline(bad)


def test_hardware_key():
    import torch

    assert hardware_key("H100") == "h100"
    assert hardware_key("cpu") == "cpu"
    if not torch.cuda.is_available():
        assert hardware_key("auto") == "cpu"
