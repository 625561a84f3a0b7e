"""The study's grid: mappings x kernel modes x workloads, each a series of batch sizes.

A series doubles its batch size from 1 until a size fails (KV capacity or GPU out of memory),
then bisects between the last size that fitted and the first that failed. The next size is a
function of the finished cells alone, so a series resumes from its cell artifacts."""

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.errors import ConfigError

KERNEL_MODES = ("fused", "unfused")
MAPPING = re.compile(r"(?:tp(?P<tp>[1-9]\d*))?(?:pp(?P<pp>[1-9]\d*))?")
WORKLOAD = re.compile(r"(?P<isl>[1-9]\d*)x(?P<osl>[1-9]\d*)")
# failures that bound the batch size from above (an "error" is no threshold: nothing to bisect)
CAPACITY_FAILURES = ("oom", "kv_capacity")


@dataclass(frozen=True, slots=True)
class Series:
    tp_size: int
    pp_size: int
    kernels: str
    input_len: int
    output_len: int

    @property
    def mapping(self) -> str:
        if self.pp_size == 1:
            return f"tp{self.tp_size}"
        return f"pp{self.pp_size}" if self.tp_size == 1 else f"tp{self.tp_size}pp{self.pp_size}"

    @property
    def workload(self) -> str:
        return f"{self.input_len}x{self.output_len}"

    @property
    def key(self) -> str:
        return f"{self.mapping}-{self.kernels}-{self.workload}"

    def cell_key(self, batch_size: int) -> str:
        return f"{self.key}-b{batch_size}"


def parse_mapping(text: str) -> tuple[int, int]:
    match = MAPPING.fullmatch(text)
    if not text or match is None:
        raise ConfigError(
            f"study: mapping {text!r} is not tp<N>, pp<N> or tp<N>pp<M>; fix study.mappings "
            f"(e.g. [tp1,tp2,pp2])"
        )
    return int(match["tp"] or 1), int(match["pp"] or 1)


def parse_workload(text: str) -> tuple[int, int]:
    match = WORKLOAD.fullmatch(text)
    if match is None:
        raise ConfigError(
            f"study: workload {text!r} is not <input tokens>x<output tokens>; fix "
            f"study.workloads (e.g. [128x128,1024x256])"
        )
    return int(match["isl"]), int(match["osl"])


def check_study(study) -> None:
    """Every problem with the study settings at once."""
    problems = []
    for text in study.mappings:
        try:
            parse_mapping(text)
        except ConfigError as exc:
            problems.append(str(exc).removeprefix("study: "))
    for text in study.workloads:
        try:
            parse_workload(text)
        except ConfigError as exc:
            problems.append(str(exc).removeprefix("study: "))
    if bad := [k for k in study.kernels if k not in KERNEL_MODES]:
        problems.append(f"study.kernels has {bad} (use {' and/or '.join(KERNEL_MODES)})")
    for key in ("mappings", "kernels", "workloads"):
        if not getattr(study, key):
            problems.append(f"study.{key} is empty (list at least one)")
    if study.max_batch_size < 1:
        problems.append(f"study.max_batch_size={study.max_batch_size} (must be >= 1)")
    if any(b < 1 or b > study.max_batch_size for b in study.batch_sizes):
        problems.append(
            f"study.batch_sizes={list(study.batch_sizes)} (each in [1, study.max_batch_size="
            f"{study.max_batch_size}])"
        )
    for key in ("bisect_steps", "num_kv_blocks", "num_warmup_requests"):
        if getattr(study, key) < 0:
            problems.append(f"study.{key}={getattr(study, key)} (must be >= 0)")
    if study.num_waves < 1:
        problems.append(f"study.num_waves={study.num_waves} (must be >= 1)")
    if study.accuracy.num_choices < 2:
        problems.append(f"study.accuracy.num_choices={study.accuracy.num_choices} (must be >= 2)")
    if problems:
        raise ConfigError("study: " + "; ".join(problems) + " (fix conf/study or the override)")


def expand(study) -> list[Series]:
    """Every series, mapping-major (one engine build a mapping serves its series in a row)."""
    check_study(study)
    return [
        Series(*parse_mapping(m), kernels, *parse_workload(w))
        for m in dict.fromkeys(study.mappings)
        for kernels in dict.fromkeys(study.kernels)
        for w in dict.fromkeys(study.workloads)
    ]


def _doubling(max_batch_size: int) -> list[int]:
    sizes, size = [], 1
    while size < max_batch_size:
        sizes.append(size)
        size *= 2
    return [*sizes, max_batch_size]


def next_batch_size(
    outcomes: Mapping[int, str | None],
    max_batch_size: int,
    bisect_steps: int,
    batch_sizes: tuple[int, ...] = (),
) -> int | None:
    """The next batch size a series runs, None when it is done. outcomes: {batch size: None if it
    fitted, else its failure kind} of the cells finished so far."""
    ladder = sorted(batch_sizes) if batch_sizes else _doubling(max_batch_size)
    failed = sorted(b for b, kind in outcomes.items() if kind is not None)
    if not failed:
        return next((b for b in ladder if b not in outcomes), None)
    first = failed[0]
    if outcomes[first] not in CAPACITY_FAILURES:
        return None
    fitted = [b for b, kind in outcomes.items() if kind is None and b < first]
    low = max(fitted, default=0)
    num_bisected = sum(1 for b in outcomes if b not in ladder)
    if low == 0 or first - low <= 1 or num_bisected >= bisect_steps:
        return None
    return (low + first) // 2
