"""The accuracy gate: verdicts, the report files, and GateFailed carrying the manifest extra."""

import json
import math

import pytest

from pipeline.errors import GateFailed
from pipeline.quant.gate import REPORT_JSON, REPORT_MD, QualityReport, enforce, write_report


def report(ppl_quantized=11.0, limit=None, ppl_reference=10.0):
    return QualityReport(
        recipe="int4_awq",
        kv_cache="none",
        quant_algo="W4A16_AWQ",
        kv_cache_quant_algo=None,
        export_dtype="float16",
        runtime="modelopt fake-quant (HF model)",
        num_eval_windows=16,
        num_eval_tokens=8176,
        ppl_reference=ppl_reference,
        ppl_quantized=ppl_quantized,
        quantize_s=12.5,
        export_s=1.0,
        eval_s=20.0,
        max_ppl_increase_pct=limit,
    )


def test_increase_and_verdict():
    assert report().ppl_increase_pct == pytest.approx(10.0)
    assert report().is_passed  # no limit set
    assert report(limit=10.5).is_passed
    assert not report(limit=0.001).is_passed
    assert report(ppl_quantized=9.0, limit=0.0).is_passed  # an improvement passes any limit >= 0


def test_non_finite_perplexity_always_fails():
    assert not report(ppl_quantized=math.inf).is_passed
    with pytest.raises(GateFailed, match="not finite.*quant.export_dtype=bfloat16"):
        enforce(report(ppl_quantized=math.nan), "/a/dir", {})


def test_failure_keeps_extra_and_names_the_key(tmp_path):
    extra = {"recipe": "int4_awq"}
    with pytest.raises(GateFailed) as err:
        enforce(report(limit=5.0), tmp_path / "quantize-abc", extra)
    assert "rose 10.00% (10.000 -> 11.000), above quant.max_ppl_increase_pct=5.0" in str(err.value)
    assert "status=failed" in str(err.value) and "quantize-abc" in str(err.value)
    assert err.value.extra is extra
    enforce(report(limit=50.0), tmp_path, extra)  # passes: no exception


def test_report_files(tmp_path):
    write_report(report(limit=5.0), tmp_path)
    data = json.loads((tmp_path / REPORT_JSON).read_text())
    assert data["ppl_increase_pct"] == 10.0 and data["is_passed"] is False
    md = (tmp_path / REPORT_MD).read_text()
    assert "| recipe | ppl | delta % | quantize s | export s |" in md
    assert "| none (float16) | 10.000 | - | - | - |" in md
    assert "| int4_awq | 11.000 | +10.00 | 12.5 | 1.0 |" in md and "FAILED" in md
