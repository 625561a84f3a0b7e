"""Calibration text and windows: deterministic, disjoint from the held-out ones, clear errors."""

import json

import pytest
import torch

from pipeline.errors import ConfigError
from pipeline.quant.calibration import (
    check_sizes,
    cut_windows,
    dataset_file,
    lee_background_path,
    load_text,
)
from pipeline.specs.quant import QuantSpec

TOKENS = list(range(1000))  # 1000 distinct ids: a window's ids tell where it came from


def windows(**kw):
    quant = QuantSpec(name="fp8", **{"seq_len": 10, "calib_size": 20, "eval_size": 5, **kw})
    return cut_windows(TOKENS, quant, "test")


def test_eval_windows_are_the_tail_and_never_calibrated():
    w = windows()
    assert w.calib.shape == (20, 10) and w.eval.shape == (5, 10)
    assert w.eval.flatten().tolist() == TOKENS[950:1000]
    assert set(w.calib.flatten().tolist()).isdisjoint(w.eval.flatten().tolist())
    assert len(set(w.calib[:, 0].tolist())) == 20  # distinct windows
    assert all(row[0] % 10 == 0 for row in w.calib.tolist())  # aligned, whole windows


def test_windows_are_deterministic_per_seed():
    assert torch.equal(windows().calib, windows().calib)
    assert not torch.equal(windows().calib, windows(seed=7).calib)
    assert torch.equal(windows().eval, windows(seed=7).eval)  # held-out set ignores the seed


def test_too_little_text_names_the_numbers_and_the_keys():
    with pytest.raises(
        ConfigError,
        match="1000 tokens = 100 windows of quant.seq_len=10; "
        "quant.calib_size=96 \\+ quant.eval_size=5",
    ):
        windows(calib_size=96)


@pytest.mark.parametrize("key", ["calib_size", "batch_size", "eval_size"])
def test_zero_sizes_are_refused(key):
    with pytest.raises(ConfigError, match=f"quant.{key} must be >= 1 \\(got 0\\)"):
        check_sizes(QuantSpec(name="fp8", **{key: 0}))


def test_default_corpus_is_gensims_lee_background():
    path = lee_background_path()
    assert path.name == "lee_background.cor" and path.stat().st_size > 300_000
    text, source = load_text("lee_background")
    assert source == str(path) and len(text.splitlines()) == 300


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="quant.calib_dataset=.*: no such file"):
        dataset_file(str(tmp_path / "nope.txt"))


def test_text_and_jsonl_files(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_text("plain text")
    assert load_text(str(txt)) == ("plain text", str(txt))
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text("\n".join(json.dumps({"text": t}) for t in ("one", "two")) + "\n\n")
    assert load_text(str(jsonl))[0] == "one\n\ntwo"


@pytest.mark.parametrize(
    "line,expected", [("{not json", "invalid JSON"), ('{"body": "x"}', 'no string "text" field')]
)
def test_bad_jsonl_names_file_and_line(tmp_path, line, expected):
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps({"text": "ok"}) + "\n" + line + "\n")
    with pytest.raises(ConfigError, match=f"b.jsonl:2: {expected}"):
        load_text(str(path))
