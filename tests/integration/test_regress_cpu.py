"""regress against the committed CPU baseline: passes on the real one, fails on a doctored one."""

import json

import pytest

from pipeline.artifacts import Manifest
from pipeline.errors import ConfigError, GateFailed
from tests.conftest import REPO, make_spec

pytestmark = [pytest.mark.slow, pytest.mark.triton]
BASELINE = REPO / "baselines" / "smollm2-135m-torch-cpu.json"


def regress_spec(session_workdir, bench_overrides, bench_dir, *extra):
    return make_spec(
        "regress",
        *bench_overrides,
        "hardware=cpu",
        f"bench.regress.bench_dir={bench_dir}",
        *extra,
        workdir=session_workdir,
    )


def test_regress_passes_on_the_committed_baseline(
    session_workdir, bench_overrides, bench_profile_dir, capsys
):
    from pipeline.stages import regress

    out = regress.run(regress_spec(session_workdir, bench_overrides, bench_profile_dir))
    result = json.loads((out / "regress.json").read_text())
    assert result["regressed"] == [] and result["baseline"] == str(BASELINE)
    assert Manifest.read(out).status == "ok"
    table = capsys.readouterr().out
    assert "accuracy.greedy_tokens" in table and "server.output_tok_s" in table


def test_regress_fails_on_a_doctored_baseline(
    session_workdir, bench_overrides, bench_profile_dir, tmp_path
):
    from pipeline.stages import regress

    doctored = json.loads(BASELINE.read_text())
    doctored["metrics"]["server.output_tok_s"]["value"] *= 100  # "the baseline was 100x faster"
    doctored["metrics"]["accuracy.greedy_tokens"]["value"][0][3] += 1
    doctored["metrics"]["accuracy.ppl"]["value"] -= 1.0
    path = tmp_path / "doctored.json"
    path.write_text(json.dumps(doctored))
    spec = regress_spec(
        session_workdir, bench_overrides, bench_profile_dir, f"bench.regress.baseline={path}"
    )
    with pytest.raises(GateFailed, match="3 metric") as excinfo:
        regress.run(spec)
    assert "make update-baseline" in str(excinfo.value)
    assert sorted(excinfo.value.extra["regressed"]) == [
        "accuracy.greedy_tokens",
        "accuracy.ppl",
        "server.output_tok_s",
    ]
    # the artifact is kept, marked failed, with the table
    (out,) = [
        d
        for d in (session_workdir / "smollm2-135m").glob("regress-*")
        if Manifest.read(d).config["baseline"] == str(path)
    ]
    assert Manifest.read(out).status == "failed"
    assert "REGRESSED" in (out / "regress.md").read_text()


def test_regress_refuses_a_baseline_of_other_bench_settings(session_workdir, bench_overrides):
    from pipeline.stages import regress

    spec = make_spec(
        "regress", *bench_overrides, "hardware=cpu", "bench.input_len=32", workdir=session_workdir
    )
    with pytest.raises(ConfigError, match=r"bench.input_len=32 \(baseline: 16\)"):
        regress.run(spec)
