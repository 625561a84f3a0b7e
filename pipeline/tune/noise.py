"""When is one measured candidate really better than another: Welch's one-sided test on the
repeated measurements, so a search never moves on a difference the noise could have made."""

import math
import statistics
from dataclasses import dataclass
from enum import StrEnum


class Verdict(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    TIE = "tie"  # inside the noise band (or the min_gain margin): no evidence either way


def t_quantile(confidence: float, dof: float) -> float:
    """Student's t quantile, by the Cornish-Fisher expansion around the normal quantile (within
    about 1% of the exact value from 2 degrees of freedom up; the standard library has no t)."""
    z = statistics.NormalDist().inv_cdf(confidence)
    nu = max(dof, 1.0)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / nu + g2 / nu**2 + g3 / nu**3


@dataclass(frozen=True, slots=True)
class Summary:
    """Costs of one candidate: lower is better."""

    num: int
    mean: float
    variance: float  # sample variance; 0 with one sample

    @classmethod
    def of(cls, samples: list[float]) -> "Summary":
        if not samples:
            raise ValueError("no samples to summarize")
        variance = statistics.variance(samples) if len(samples) > 1 else 0.0
        return cls(len(samples), statistics.fmean(samples), variance)

    @property
    def stderr(self) -> float:
        return math.sqrt(self.variance / self.num)


def noise_band(a: Summary, b: Summary, confidence: float) -> float:
    """How far apart the two means must be before the difference counts (Welch's bound);
    unbounded while either side has a single sample, whose noise is unknown."""
    if min(a.num, b.num) < 2:
        return math.inf
    var_a, var_b = a.variance / a.num, b.variance / b.num
    se = math.sqrt(var_a + var_b)
    if se == 0.0:
        return 0.0
    # Welch-Satterthwaite degrees of freedom
    parts = [v**2 / (s.num - 1) for v, s in ((var_a, a), (var_b, b)) if v > 0]
    dof = (var_a + var_b) ** 2 / sum(parts) if parts else 1.0
    return t_quantile(confidence, dof) * se


def compare(candidate: Summary, incumbent: Summary, confidence: float, min_gain: float) -> Verdict:
    """BETTER when the candidate's mean cost is below the incumbent's by more than the noise
    band plus min_gain (relative to the incumbent), WORSE likewise above it, else TIE."""
    band = noise_band(candidate, incumbent, confidence) + min_gain * abs(incumbent.mean)
    diff = incumbent.mean - candidate.mean
    if diff > band:
        return Verdict.BETTER
    if -diff > band:
        return Verdict.WORSE
    return Verdict.TIE
