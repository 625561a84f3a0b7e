"""One module per stage; each exposes run(spec: PipelineSpec) -> Path (its artifact dir).

A stage calls the stages it depends on (which return at once when up to date), so any stage can
be asked for directly: `pipeline build` fetches, converts and quantizes first when needed.
"""

from pipeline.specs.pipeline import PipelineSpec


def forced(spec: PipelineSpec, stage: str) -> bool:
    """`force=true` re-runs the stage that was asked for, not the upstream ones it calls."""
    return spec.force and spec.stage == stage
