"""Accuracy gate: perplexity of the unquantized vs the quantized model, a report, a verdict."""

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.errors import GateFailed

REPORT_JSON = "quant_report.json"
REPORT_MD = "quant_report.md"


@dataclass(frozen=True, slots=True)
class QualityReport:
    recipe: str
    kv_cache: str
    quant_algo: str
    kv_cache_quant_algo: str | None
    export_dtype: str
    runtime: str  # what produced the quantized logits
    num_eval_windows: int
    num_eval_tokens: int  # predicted tokens
    ppl_reference: float  # unquantized model, export_dtype
    ppl_quantized: float
    quantize_s: float  # calibration + quantizer insertion
    export_s: float
    eval_s: float  # both perplexity runs
    max_ppl_increase_pct: float | None

    @property
    def ppl_increase_pct(self) -> float:
        return (self.ppl_quantized / self.ppl_reference - 1.0) * 100.0

    @property
    def is_finite(self) -> bool:
        return math.isfinite(self.ppl_reference) and math.isfinite(self.ppl_quantized)

    @property
    def is_passed(self) -> bool:
        if not self.is_finite:
            return False
        limit = self.max_ppl_increase_pct
        return limit is None or self.ppl_increase_pct <= limit

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "ppl_increase_pct": round(self.ppl_increase_pct, 3),
            "is_passed": self.is_passed,
        }

    def markdown(self) -> str:
        limit = "none" if self.max_ppl_increase_pct is None else f"{self.max_ppl_increase_pct}%"
        kv = f" + kv {self.kv_cache}" if self.kv_cache != "none" else ""
        return "\n".join(
            [
                f"# Quantization report: {self.recipe}{kv} ({self.quant_algo})",
                "",
                f"Held-out perplexity over {self.num_eval_windows} windows "
                f"({self.num_eval_tokens} predicted tokens), {self.export_dtype}; quantized logits "
                f"from {self.runtime}. Gate: max increase {limit} -> "
                f"{'passed' if self.is_passed else 'FAILED'}.",
                "",
                "| recipe | ppl | delta % | quantize s | export s |",
                "|---|---|---|---|---|",
                f"| none ({self.export_dtype}) | {self.ppl_reference:.3f} | - | - | - |",
                f"| {self.recipe}{kv} | {self.ppl_quantized:.3f} | {self.ppl_increase_pct:+.2f} | "
                f"{self.quantize_s:.1f} | {self.export_s:.1f} |",
                "",
            ]
        )


def write_report(report: QualityReport, out_dir: Path) -> None:
    (out_dir / REPORT_JSON).write_text(json.dumps(report.to_dict(), indent=2))
    (out_dir / REPORT_MD).write_text(report.markdown())


def enforce(report: QualityReport, artifact_dir: Path, extra: dict) -> None:
    """Raise GateFailed (the artifact is kept with status=failed and this manifest extra)."""
    if report.is_passed:
        return
    if not report.is_finite:
        reason = (
            f"perplexity is not finite (reference {report.ppl_reference}, quantized "
            f"{report.ppl_quantized}): the model overflows in {report.export_dtype}; set "
            f"quant.export_dtype=bfloat16"
        )
    else:
        reason = (
            f"perplexity rose {report.ppl_increase_pct:.2f}% ({report.ppl_reference:.3f} -> "
            f"{report.ppl_quantized:.3f}), above quant.max_ppl_increase_pct="
            f"{report.max_ppl_increase_pct}; raise the limit, calibrate on more or closer "
            f"data (quant.calib_size, quant.calib_dataset) or pick a milder recipe"
        )
    error = GateFailed(
        f"quantize: {report.recipe} failed the accuracy gate: {reason}; artifact "
        f"kept with status=failed at {artifact_dir} (see {REPORT_MD})"
    )
    error.extra = extra
    raise error
