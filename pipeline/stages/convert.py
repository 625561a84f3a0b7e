"""convert: HF dir (from fetch) -> TensorRT-LLM checkpoint, dtype cast and TP/PP sharded."""

from pathlib import Path

from pipeline.artifacts import StageRequest, produce_artifact, verify_outputs
from pipeline.checkpoint.hf_to_trtllm import convert
from pipeline.specs.pipeline import PipelineSpec
from pipeline.stages import fetch, forced


def run(spec: PipelineSpec) -> Path:
    hf_dir = fetch.run(spec)
    par = spec.parallel
    request = StageRequest(
        workdir=Path(spec.workdir),
        model=spec.model.name,
        stage="convert",
        config={"dtype": spec.model.dtype, "tp_size": par.tp_size, "pp_size": par.pp_size},
        upstream={"hf_dir": hf_dir},
        force=forced(spec, "convert"),
    )

    def produce(out_dir: Path) -> dict:
        verify_outputs(hf_dir)
        cfg = convert(hf_dir, out_dir, spec.model.dtype, par.tp_size, par.pp_size)
        return {
            "architecture": cfg["architecture"],
            "world_size": cfg["mapping"]["world_size"],
            "hf_dir": str(hf_dir),
        }

    return produce_artifact(request, produce)
