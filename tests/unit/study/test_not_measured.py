"""Why a series has no cells comes first in the report: a process killed for memory, an error."""

import signal

from pipeline.specs.study import StudySpec
from pipeline.study.assemble import assemble
from pipeline.study.report import markdown
from pipeline.study.runner import _exit_reason


def test_a_killed_series_process_is_named_as_killed_for_memory():
    why = _exit_reason(-signal.SIGKILL)
    assert "killed (SIGKILL)" in why and "memory" in why and "study.max_batch_size" in why
    assert "killed (SIGSEGV)" in _exit_reason(-signal.SIGSEGV)
    assert "exited with code 1" in _exit_reason(1)


def test_the_report_lists_what_was_not_measured_before_its_cells():
    notes = ["tp2: not run, no engine: num_attention_heads=9 is not divisible by tp_size=2"]
    text = markdown(assemble([], StudySpec(), "smollm2-135m", "cpu", notes))
    head, cells = text.split("## Cells")
    assert "## Not measured" in head and notes[0] in head
    assert notes[0] not in cells
