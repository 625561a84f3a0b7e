"""Serving knobs as a search space: the most output tokens a second of the bench workload within
a TTFT/ITL p99 budget, measured with the bench's own targets.

Cost: ms per output token (1000 / output tok/s), times 1 + penalty x the relative excess over
each p99 budget, so an infeasible candidate can still be compared (and loses). Each repeat is
one run of the workload on the candidate's engine. The gate is one run too: every request must
finish, none refused or failed, each with all its tokens (a synthetic request runs to exactly
its max_tokens). direct: the built engine in-process, with max_batch_size and max_num_tokens
lowered at run time (the build limits cap them); server: each candidate deployed and served.
"""

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.bench.direct_target import DirectTarget
from pipeline.bench.engine_facts import EngineFacts
from pipeline.bench.session import Workload, measure
from pipeline.errors import ConfigError
from pipeline.specs.pipeline import PipelineSpec
from pipeline.triton_models.engine_runtime import engine_runtime
from pipeline.tune.search_space import Grid, Knob

log = logging.getLogger(__name__)
SERVER_ONLY = ("instances", "max_response_rate")
# knob -> (its config key in the overlay, where the direct engine takes it)
KEYS = {
    "max_batch_size": "build.max_batch_size",
    "max_num_tokens": "build.max_num_tokens",
    "num_scheduler_steps": "deploy.torch.num_scheduler_steps",
    "num_kv_blocks": "deploy.torch.num_kv_blocks",
    "instances": "deploy.torch.instances",
    "max_response_rate": "deploy.torch.max_response_rate",
}


def configured(spec: PipelineSpec, knob: str):
    """The knob's value in the composed config (what runs without tuning)."""
    section, _, name = KEYS[knob].partition(".")
    node = getattr(spec, section)
    for part in name.split("."):
        node = getattr(node, part)
    return node


def with_settings(spec: PipelineSpec, settings: dict):
    """The spec with the knobs' values set at their config keys."""
    build, torch_opts = spec.build, spec.deploy.torch
    for knob, value in settings.items():
        if KEYS[knob].startswith("build."):
            build = dataclasses.replace(build, **{knob: value})
        else:
            torch_opts = dataclasses.replace(torch_opts, **{knob: value})
    deploy = dataclasses.replace(spec.deploy, torch=torch_opts)
    return dataclasses.replace(spec, build=build, deploy=deploy)


def knobs_for(spec: PipelineSpec, facts: EngineFacts) -> list[Knob]:
    search = spec.tune.serving
    if search.target not in ("direct", "server"):
        raise ConfigError(f"tune.serving.target={search.target!r}: use direct or server")
    if search.target == "direct" and (extra := [k for k in SERVER_ONLY if getattr(search, k)]):
        raise ConfigError(
            f"tune.serving.{extra[0]} is measured through a server: set "
            f"tune.serving.target=server, or tune.serving.{extra[0]}=[]"
        )
    if search.target == "server" and spec.bench.server_url:
        raise ConfigError(
            f"tune.serving.target=server deploys and serves each candidate itself; unset "
            f"bench.server_url={spec.bench.server_url!r} (a running server keeps its own knobs)"
        )
    limits = {"max_batch_size": facts.max_batch_size, "max_num_tokens": spec.build.max_num_tokens}
    knobs = []
    for name in KEYS:
        values = tuple(getattr(search, name))
        if name in limits and search.target == "direct":  # runtime limits only lower the build's
            values = tuple(v for v in values if v <= limits[name])
        if values:
            knobs.append(Knob.with_default(name, values, configured(spec, name)))
    return knobs


class ServingSpace:
    name = "serving"

    def __init__(
        self,
        spec,
        engine_dir: Path,
        workload: Workload,
        deploy: Callable | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.spec = spec
        self.engine_dir = engine_dir
        self.workload = workload
        self.deploy = deploy  # spec -> deploy artifact (target=server)
        self.clock = clock
        self.search = spec.tune.serving
        self.grid = Grid(knobs_for(spec, EngineFacts.read(engine_dir)), self._is_valid)
        self.metrics: dict[tuple, list[dict]] = {}  # per candidate, each run's summary
        self._open: tuple[tuple, contextlib.ExitStack, object] | None = None
        self._unmeasured: set[tuple] = set()  # gate runs not yet counted as measurements

    def _is_valid(self, settings: dict) -> bool:
        chunked = self.spec.deploy.torch.enable_chunked_prefill
        tokens = settings.get("max_num_tokens", self.spec.build.max_num_tokens)
        return chunked or tokens >= self.spec.bench.input_len

    def initial(self) -> tuple:
        return self.grid.initial()

    def neighbour(self, candidate, rng):
        return self.grid.neighbour(candidate, rng)

    def sample(self, rng):
        return self.grid.sample(rng)

    def describe(self, candidate) -> dict:
        return self.grid.describe(candidate)

    def overrides(self, candidate) -> list[str]:
        """The command-line overrides that deploy this candidate."""
        return [f"{KEYS[k]}={v}" for k, v in self.describe(candidate).items()]

    def check(self, candidate) -> str | None:
        records = self._run(candidate)
        self._unmeasured.add(candidate)  # the gate's run is the candidate's first measurement
        failed = [r for r in records if r.error]
        if failed:
            return f"{len(failed)} of {len(records)} requests failed: {failed[0].error}"
        for request, record in zip(self.workload.measured, records, strict=True):
            expected = request.max_tokens if request.ignore_eos else record.num_output_tokens
            if record.num_output_tokens != expected or record.num_output_tokens < 1:
                return (
                    f"request {record.request_id} returned {record.num_output_tokens} tokens, "
                    f"{request.max_tokens} asked"
                )
        return None

    def measure(self, candidate, repeats: int) -> list[float]:
        runs = self.metrics[candidate][-1:] if candidate in self._unmeasured else []
        self._unmeasured.discard(candidate)
        while len(runs) < repeats:
            self._run(candidate)
            runs.append(self.metrics[candidate][-1])
        return [self.cost(run) for run in runs]

    def cost(self, summary: dict) -> float:
        tok_s = summary["output_tok_s"]
        ms_per_token = 1000.0 / tok_s if tok_s > 0 else float("inf")
        excess = max(0.0, summary["ttft_ms_p99"] / self.search.ttft_p99_ms - 1) + max(
            0.0, summary["itl_ms_p99"] / self.search.itl_p99_ms - 1
        )
        return ms_per_token * (1 + self.search.penalty * excess)

    def is_feasible(self, summary: dict) -> bool:
        return (
            summary["ttft_ms_p99"] <= self.search.ttft_p99_ms
            and summary["itl_ms_p99"] <= self.search.itl_p99_ms
        )

    def _run(self, candidate) -> list:
        target = self._target(candidate)
        result, records = measure(target, self.spec.bench, self.workload, None, self.clock())
        summary = result["summary"]
        self.metrics.setdefault(candidate, []).append(
            {k: summary[k] for k in ("output_tok_s", "ttft_ms_p99", "itl_ms_p99", "num_errors")}
        )
        return records

    def _target(self, candidate):
        """The candidate's engine or server, kept open between its gate and its measurements."""
        if self._open is not None and self._open[0] == candidate:
            return self._open[2]
        self.close()
        stack = contextlib.ExitStack()
        settings = self.describe(candidate)
        spec = with_settings(self.spec, settings)
        if self.search.target == "direct":
            limits = {k: settings[k] for k in ("max_batch_size", "max_num_tokens") if k in settings}
            runtime = {**engine_runtime(spec.deploy), **limits}
            target = DirectTarget(
                self.engine_dir, spec.backend.device, runtime, spec.deploy.torch.num_threads
            )
            stack.callback(target.close)
        else:
            from pipeline.bench.server_target import server_target

            target = stack.enter_context(server_target(spec, None, self.deploy(spec)))
        self._open = (candidate, stack, target)
        return target

    def close(self) -> None:
        if self._open is not None:
            self._open[1].close()
            self._open = None
