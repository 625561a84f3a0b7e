"""build: TensorRT-LLM checkpoint (from convert or quantize) -> engine dir (chosen backend)."""

from dataclasses import asdict
from pathlib import Path

from pipeline.artifacts import Manifest, StageRequest, produce_artifact, verify_outputs
from pipeline.backends import load_backend
from pipeline.specs.pipeline import PipelineSpec
from pipeline.stages import forced, quantize
from pipeline.tune import engine_configs


def run(spec: PipelineSpec) -> Path:
    backend = load_backend(spec)
    backend.check_available()
    ckpt_dir = quantize.run(spec)  # convert's checkpoint when quant=none
    tokenizer_dir = Path(Manifest.read(ckpt_dir).extra["hf_dir"])
    tuned = engine_configs.for_build(spec, ckpt_dir)  # `make tune tune=kernels` results
    config = {"backend": asdict(spec.backend), "build": asdict(spec.build)}
    if tuned is not None and tuned.digest():
        config["kernel_configs"] = tuned.digest()
    request = StageRequest(
        workdir=Path(spec.workdir),
        model=spec.model.name,
        stage=f"build-{backend.name}",
        config={**config, "hardware": spec.hardware},
        upstream={"checkpoint": ckpt_dir},
        force=forced(spec, "build"),
    )

    def produce(out_dir: Path) -> dict:
        verify_outputs(ckpt_dir)
        extra = backend.build(ckpt_dir, tokenizer_dir, out_dir) or {}
        if tuned is not None:
            extra["kernel_tuning"] = tuned.write(out_dir)
        return {
            "backend": backend.name,
            "checkpoint_dir": str(ckpt_dir),
            "tokenizer_dir": str(tokenizer_dir),
            **extra,
        }

    return produce_artifact(request, produce)
