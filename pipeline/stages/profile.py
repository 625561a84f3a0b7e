"""profile: the bench with the resource sampler on (NVML per GPU: utilisation, memory, PCIe
TX/RX; without NVML, process CPU% and RSS), phases aligned -> timeline.json, timeline.png."""

from pathlib import Path

from pipeline.specs.pipeline import PipelineSpec
from pipeline.stages.bench import run_measurement


def run(spec: PipelineSpec) -> Path:
    return run_measurement(spec, "profile", with_profiler=True)
