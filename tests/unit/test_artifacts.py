"""Artifact store: up-to-date skip, force, atomic swap, failures keep the old artifact."""

import errno
import json
import os
import shutil

import numpy
import pytest
import torch
from safetensors.torch import save_file

from pipeline import manifest as manifest_module
from pipeline.artifacts import Manifest, StageRequest, produce_artifact, verify_outputs
from pipeline.errors import ArtifactError, GateFailed, StageError


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


def test_a_full_disk_is_one_clear_error_and_leaves_the_previous_artifact(tmp_path):
    good = produce_artifact(_request(tmp_path), _writer("good", []))

    def fills_the_disk(out):
        (out / "rank0.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out / "rank0.safetensors"))

    with pytest.raises(StageError) as err:
        produce_artifact(_request(tmp_path, force=True), fills_the_disk)
    message = str(err.value)
    assert message.startswith("s: no space left on the disk of workdir=")
    assert "rank0.safetensors" in message and "GB free" in message and "workdir=" in message
    assert err.value.__cause__ is None and err.value.__suppress_context__
    assert (good / "data.txt").read_text() == "good"
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
    with pytest.raises(ArtifactError, match="data.txt: size 8 bytes, the manifest says 2"):
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


def _corrupt_middle(path, num_bytes):
    """Overwrite `num_bytes` in the middle of `path` in place (same size), later than the build."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek((size - num_bytes) // 2)
        flipped = bytes(b ^ 0xFF for b in f.read(num_bytes))
        f.seek((size - num_bytes) // 2)
        f.write(flipped)
    # a later write than the manifest's: one second on, whatever the filesystem's clock grain
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _blob_writer(calls, size=1 << 20):
    def produce(out):
        calls.append(size)
        (out / "weights.bin").write_bytes(bytes(range(256)) * (size // 256))
        (out / "config.json").write_text("{}")

    return produce


def test_corrupted_output_is_refused_not_up_to_date(tmp_path):
    calls = []
    art = produce_artifact(_request(tmp_path), _blob_writer(calls))
    weights = art / "weights.bin"
    _corrupt_middle(weights, 64 << 10)
    assert weights.stat().st_size == 1 << 20
    with pytest.raises(ArtifactError) as err:
        produce_artifact(_request(tmp_path), _blob_writer(calls))
    message = str(err.value)
    assert str(art) in message and "weights.bin" in message and "sha256 differs" in message
    assert "force=true" in message and calls == [1 << 20]  # refused, not rebuilt silently
    produce_artifact(_request(tmp_path, force=True), _blob_writer(calls))
    assert len(calls) == 2 and verify_outputs(art).status == "ok"


def test_missing_or_resized_output_is_refused(tmp_path):
    art = produce_artifact(_request(tmp_path), _blob_writer([]))
    with open(art / "weights.bin", "ab") as f:
        f.write(b"tail")
    with pytest.raises(ArtifactError, match=r"weights.bin: size 1048580 bytes, the manifest says"):
        produce_artifact(_request(tmp_path), _blob_writer([]))
    (art / "weights.bin").unlink()
    with pytest.raises(ArtifactError, match=r"weights.bin: missing.*force=true"):
        produce_artifact(_request(tmp_path), _blob_writer([]))


def test_unchanged_files_are_not_hashed_and_a_touch_is_accepted(tmp_path, monkeypatch):
    calls = []
    art = produce_artifact(_request(tmp_path), _blob_writer(calls))
    hashed = []
    real_sha256 = manifest_module.sha256_file
    monkeypatch.setattr(
        manifest_module, "sha256_file", lambda p: hashed.append(p.name) or real_sha256(p)
    )
    produce_artifact(_request(tmp_path), _blob_writer(calls))
    assert hashed == [] and calls == [1 << 20]
    st = (art / "weights.bin").stat()
    os.utime(art / "weights.bin", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    produce_artifact(_request(tmp_path), _blob_writer(calls))
    assert hashed == ["weights.bin"] and calls == [1 << 20]
    produce_artifact(_request(tmp_path), _blob_writer(calls))  # the new stat was recorded
    assert hashed == ["weights.bin"]


def test_manifest_without_file_stats_is_hashed_once(tmp_path):
    art = produce_artifact(_request(tmp_path), _blob_writer([]))
    data = json.loads((art / "manifest.json").read_text())
    del data["output_stats"]  # as written before file stats were recorded
    (art / "manifest.json").write_text(json.dumps(data))
    assert verify_outputs(art).status == "ok"
    assert set(Manifest.read(art).output_stats) == {"weights.bin", "config.json"}
    _corrupt_middle(art / "weights.bin", 4096)
    (art / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="weights.bin: sha256 differs"):
        verify_outputs(art)


def test_skipped_stage_refuses_a_corrupted_upstream(tmp_path):
    up = produce_artifact(StageRequest(tmp_path, "m", "build-x", {}), _blob_writer([]))
    calls = []
    down = lambda: StageRequest(tmp_path, "m", "deploy-x", {}, upstream={"e": up})  # noqa: E731
    produce_artifact(down(), _writer("d", calls))
    _corrupt_middle(up / "weights.bin", 4096)
    with pytest.raises(ArtifactError) as err:
        produce_artifact(down(), _writer("d", calls))
    assert "weights.bin: sha256 differs" in str(err.value) and str(up) in str(err.value)
    assert "pipeline build force=true" in str(err.value) and calls == ["d"]


def _fill_with_safetensors(out):
    save_file({"w": torch.zeros(1 << 20)}, str(out / "rank0.safetensors"))


def _fill_with_torch_save(out):
    torch.save({"w": torch.zeros(1 << 20)}, out / "state.pt")


def _fill_with_numpy(out):
    numpy.save(out / "calib.npy", numpy.zeros(1 << 20))


def _fill_with_json(out):
    (out / "config.json").write_text(json.dumps({"w": "x" * (1 << 21)}))


def _fill_with_copytree(out):
    src = out.parents[3] / "src"  # tmp_path: off the small disk (out is small_disk/workdir/m/.s-*)
    src.mkdir(exist_ok=True)
    (src / "tokenizer.json").write_bytes(b"x" * (1 << 21))
    shutil.copytree(src, out / "tokenizer")


@pytest.mark.parametrize(
    "writer",
    [
        _fill_with_safetensors,
        _fill_with_torch_save,
        _fill_with_numpy,
        _fill_with_json,
        _fill_with_copytree,
    ],
    ids=lambda w: w.__name__.removeprefix("_fill_with_"),
)
def test_every_writer_that_fills_a_real_disk_ends_in_one_line(small_disk, writer):
    workdir = small_disk / "workdir"
    good = produce_artifact(_request(workdir), _writer("good", []))
    with pytest.raises(StageError) as err:
        produce_artifact(_request(workdir, force=True), writer)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"s: no space left on the disk of workdir={workdir.resolve()} (")
    assert f"while writing {good}/" in message and " MB free once" in message
    assert err.value.__cause__ is None and err.value.__suppress_context__
    assert (good / "data.txt").read_text() == "good"
    assert [p.name for p in good.parent.iterdir()] == [good.name]


def test_a_failed_write_on_a_disk_with_room_is_not_called_full(tmp_path):
    def fails(out):
        (out / "state.pt").write_bytes(b"half")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    with pytest.raises(RuntimeError, match="unexpected pos"):
        produce_artifact(_request(tmp_path), fails)
