"""The report names the command that ran the study as it can be pasted into a shell: the stage
and overrides as typed, without the ++ and the callback the CLI adds for Hydra."""

import sys

from pipeline import cli
from pipeline.study.assemble import command


def test_the_cli_command_is_named_as_typed(monkeypatch):
    typed = ["study", "study.batch_sizes=[1,4]", "model=smollm2-135m", "workdir=/tmp/w"]
    argv = cli._overrides_checked_together(cli._argv_with_stage(typed))
    assert argv[0] == "++stage=study"  # what the CLI hands Hydra
    monkeypatch.setattr(sys, "argv", ["pipeline", argv[0], cli.CONFIG_CHECK, *argv[1:]])
    assert command() == (
        "python -m pipeline study 'study.batch_sizes=[1,4]' model=smollm2-135m workdir=/tmp/w"
    )


def test_a_study_run_from_python_says_so(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["pytest", "-q"])
    assert command() == "pipeline.stages.study.run() from Python"
