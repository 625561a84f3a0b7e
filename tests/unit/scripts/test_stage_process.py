"""scripts.stage_process: a stage run by the CLI in a fresh process returns its artifact dir."""

import pytest

from scripts.stage_process import run_step


@pytest.mark.slow
def test_a_step_returns_the_stage_artifact_the_cli_made(tmp_path):
    workdir = tmp_path / "work"
    log = tmp_path / "fetch.log"
    artifact = run_step("fetch", [f"workdir={workdir}"], log, 300)
    assert artifact.is_dir() and artifact.is_relative_to(workdir)
    assert (artifact / "config.json").is_file()
    assert f"fetch: {artifact}" in log.read_text()  # the CLI's own output stays in the log
