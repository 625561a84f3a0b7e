"""The study's grid: mappings x kernels x workloads, and the batch sizes a series runs (doubling,
then bisection after a capacity failure), as a function of the cells finished so far."""

import pytest

from pipeline.errors import ConfigError
from pipeline.specs.study import StudySpec
from pipeline.study.grid import expand, next_batch_size, parse_mapping


def run_series(fails_from: int, max_batch: int, bisect_steps: int, kind: str = "kv_capacity"):
    """The sizes a series runs against a host where sizes >= fails_from fail with `kind`."""
    outcomes: dict[int, str | None] = {}
    while (size := next_batch_size(outcomes, max_batch, bisect_steps)) is not None:
        assert size not in outcomes
        outcomes[size] = kind if size >= fails_from else None
    return list(outcomes)


def test_expand_is_mapping_major_and_names_each_series():
    study = StudySpec(mappings=("tp1", "tp2", "pp2", "tp2pp2"), workloads=("128x128", "1024x256"))
    series = expand(study)
    assert len(series) == 4 * 2 * 2
    assert [s.key for s in series[:4]] == [
        "tp1-fused-128x128",
        "tp1-fused-1024x256",
        "tp1-unfused-128x128",
        "tp1-unfused-1024x256",
    ]
    assert {(s.tp_size, s.pp_size, s.mapping) for s in series} == {
        (1, 1, "tp1"),
        (2, 1, "tp2"),
        (1, 2, "pp2"),
        (2, 2, "tp2pp2"),
    }
    assert series[-1].cell_key(64) == "tp2pp2-unfused-1024x256-b64"


def test_bad_settings_are_refused_together_naming_each():
    study = StudySpec(
        mappings=("tp2", "dp2"), kernels=("fused", "graphs"), workloads=("128",), batch_sizes=(0,)
    )
    with pytest.raises(ConfigError) as err:
        expand(study)
    text = str(err.value)
    for part in ("'dp2'", "'128'", "['graphs']", "study.batch_sizes=[0]"):
        assert part in text, part
    assert parse_mapping("pp4") == (1, 4)


def test_doubling_until_a_capacity_failure_then_bisection():
    # fits up to 47: 1..32 fit, 64 fails, then 48 fails, 40 fits (two bisection steps)
    assert run_series(48, 512, 2) == [1, 2, 4, 8, 16, 32, 64, 48, 40]
    # more steps narrow it to the exact threshold
    assert run_series(48, 512, 10) == [1, 2, 4, 8, 16, 32, 64, 48, 40, 44, 46, 47]


def test_no_failure_runs_the_ladder_up_to_the_largest_size():
    assert run_series(10**6, 48, 2) == [1, 2, 4, 8, 16, 32, 48]


def test_an_error_or_a_failing_batch_1_is_not_bisected():
    assert run_series(8, 512, 4, kind="error") == [1, 2, 4, 8]
    assert run_series(1, 512, 4) == [1]


def test_explicit_batch_sizes_are_run_in_order_and_resume_from_finished_cells():
    assert next_batch_size({}, 512, 2, (4, 1)) == 1
    assert next_batch_size({1: None}, 512, 2, (4, 1)) == 4
    assert next_batch_size({1: None, 4: None}, 512, 2, (4, 1)) is None
    # resuming: whatever finished already is skipped, whichever order it ran in
    assert next_batch_size({1: None, 2: None, 4: "oom"}, 512, 2) == 3
