import pytest

from pipeline.bench.comparator import compare, compare_metric, format_table


def entry(value, kind, tolerance=0.0, better="equal"):
    return {"value": value, "kind": kind, "tolerance": tolerance, "better": better}


@pytest.mark.parametrize(
    "current,status", [(100.0, "ok"), (60.0, "ok"), (49.0, "REGRESSED"), (300.0, "better")]
)
def test_relative_higher_is_better(current, status):
    assert (
        compare_metric("tok_s", entry(100.0, "relative", 0.5, "higher"), current).status == status
    )


@pytest.mark.parametrize(
    "current,status", [(10.0, "ok"), (29.0, "ok"), (31.0, "REGRESSED"), (1.0, "better")]
)
def test_relative_lower_is_better(current, status):
    assert compare_metric("ttft", entry(10.0, "relative", 2.0, "lower"), current).status == status


@pytest.mark.parametrize("current,status", [(12.04, "ok"), (12.06, "REGRESSED"), (11.5, "better")])
def test_absolute_ppl(current, status):
    assert compare_metric("ppl", entry(12.0, "absolute", 0.05, "lower"), current).status == status


def test_exact_tokens_and_missing_metric():
    base = entry([[1, 2, 3], [4, 5]], "exact")
    assert compare_metric("tok", base, [[1, 2, 3], [4, 5]]).status == "ok"
    row = compare_metric("tok", base, [[1, 2, 3], [4, 6]])
    assert row.status == "REGRESSED" and row.is_regression
    assert compare_metric("tok", base, None).status == "MISSING"
    assert compare_metric("x", entry(1.0, "relative", 0.1, "higher"), float("nan")).is_regression


def test_compare_judges_baseline_metrics_and_formats_a_table():
    rows = compare(
        {"a": entry(1.0, "relative", 0.1, "higher"), "b": entry(0, "exact")},
        {"a": 1.05, "b": 0, "extra": 3},
    )
    assert [r.metric for r in rows] == ["a", "b"]
    table = format_table(rows)
    assert table.splitlines()[0].startswith("| metric") and "REGRESSED" not in table
