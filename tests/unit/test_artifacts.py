"""Artifact store: up-to-date skip, force, atomic swap, failures keep the old artifact."""

import json

import pytest

from pipeline.artifacts import Manifest, StageRequest, produce_artifact, verify_outputs
from pipeline.errors import ArtifactError, GateFailed


def _request(tmp_path, **kw):
    return StageRequest(workdir=tmp_path, model="m", stage="s", config={"a": 1}, **kw)


def _writer(text, calls):
    def produce(out):
        calls.append(text)
        (out / "data.txt").write_text(text)
        return {"note": text}

    return produce


def test_second_run_is_up_to_date_and_force_reruns(tmp_path):
    calls = []
    first = produce_artifact(_request(tmp_path), _writer("v1", calls))
    again = produce_artifact(_request(tmp_path), _writer("v2", calls))
    assert first == again and calls == ["v1"]
    assert (first / "data.txt").read_text() == "v1"
    produce_artifact(_request(tmp_path, force=True), _writer("v2", calls))
    assert calls == ["v1", "v2"] and (first / "data.txt").read_text() == "v2"
    manifest = Manifest.read(first)
    assert manifest.status == "ok" and manifest.extra == {"note": "v2"}
    assert set(manifest.outputs) == {"data.txt"} and "python" in manifest.versions


def test_config_change_gets_its_own_dir(tmp_path):
    a = produce_artifact(_request(tmp_path), _writer("x", []))
    b = produce_artifact(StageRequest(tmp_path, "m", "s", {"a": 2}), _writer("y", []))
    assert a != b and a.name.startswith("s-") and (a / "data.txt").read_text() == "x"


def test_failure_leaves_previous_artifact_and_no_temp_dirs(tmp_path):
    good = produce_artifact(_request(tmp_path), _writer("good", []))

    def broken(out):
        (out / "data.txt").write_text("half")
        raise ArtifactError("input.bin: corrupted")

    with pytest.raises(ArtifactError):
        produce_artifact(_request(tmp_path, force=True), broken)
    assert (good / "data.txt").read_text() == "good"
    assert Manifest.read(good).status == "ok"
    assert [p.name for p in good.parent.iterdir()] == [good.name]


def test_gate_failure_keeps_artifact_marked_failed_and_reruns_next_time(tmp_path):
    def gated(out):
        (out / "report.json").write_text("{}")
        raise GateFailed("ppl +40% > 5%")

    with pytest.raises(GateFailed):
        produce_artifact(_request(tmp_path), gated)
    target = _request(tmp_path).artifact_dir
    assert Manifest.read(target).status == "failed"
    calls = []
    produce_artifact(_request(tmp_path), _writer("fixed", calls))
    assert calls == ["fixed"]


def test_upstream_change_triggers_rerun(tmp_path):
    up = produce_artifact(StageRequest(tmp_path, "m", "up", {}), _writer("u1", []))
    calls = []
    down = lambda: StageRequest(tmp_path, "m", "down", {}, upstream={"x": up})  # noqa: E731
    produce_artifact(down(), _writer("d", calls))
    produce_artifact(down(), _writer("d", calls))
    assert calls == ["d"]
    produce_artifact(StageRequest(tmp_path, "m", "up", {}, force=True), _writer("u2", []))
    produce_artifact(down(), _writer("d", calls))
    assert calls == ["d", "d"]


def test_verify_outputs_detects_edits_and_missing_files(tmp_path):
    art = produce_artifact(_request(tmp_path), _writer("ok", []))
    verify_outputs(art)
    (art / "data.txt").write_text("tampered")
    with pytest.raises(ArtifactError, match="data.txt: sha256 differs"):
        verify_outputs(art)
    (art / "data.txt").unlink()
    with pytest.raises(ArtifactError, match="data.txt: missing"):
        verify_outputs(art)


def test_unreadable_manifest_is_an_artifact_error(tmp_path):
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="unreadable manifest"):
        Manifest.read(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"stage": "x"}))
    with pytest.raises(ArtifactError):
        Manifest.read(tmp_path)
