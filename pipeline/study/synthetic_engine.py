"""Engines of a published shape with synthetic weights (pipeline.synthetic.weights: drawn on
the GPUs when the engine loads, split per rank as convert splits them): the study's timing,
communication and memory at that shape, without its weights. Their accuracy only shows that it
does not move with batch size (random weights score near chance)."""

import dataclasses
from pathlib import Path

from pipeline.artifacts import StageRequest, produce_artifact
from pipeline.errors import ConfigError
from pipeline.specs.pipeline import PipelineSpec
from pipeline.synthetic.shapes import LLAMA_8B, SMOLLM2
from pipeline.synthetic.weights import HOOK, checkpoint_config, write_engine

SHAPES = {"llama-8b": LLAMA_8B, "smollm2-135m": SMOLLM2}


def synthetic_engine(spec: PipelineSpec, model: str, tokenizer_dir: Path) -> Path:
    """The artifact holding `engine/`: spec.study.synthetic_shape at spec.parallel, under
    spec.build's limits, with the tokenizer of tokenizer_dir."""
    name = spec.study.synthetic_shape
    if name not in SHAPES:
        raise ConfigError(
            f"study: synthetic_shape={name!r} is unknown; use one of {', '.join(SHAPES)} or null "
            f"(the configured model's weights)"
        )
    tp, pp = spec.parallel.tp_size, spec.parallel.pp_size
    cfg = checkpoint_config(SHAPES[name], spec.study.synthetic_dtype, tp, pp, None)
    request = StageRequest(
        workdir=Path(spec.workdir),
        model=model,
        stage=f"study-engine-tp{tp}pp{pp}",
        config={"checkpoint": cfg, "build": dataclasses.asdict(spec.build)},
        upstream={"tokenizer": tokenizer_dir},
    )

    def produce(out_dir: Path) -> dict:
        write_engine(cfg, spec.build, tokenizer_dir, out_dir / "engine")
        return {"shape": name, "weights_loader": HOOK}

    return produce_artifact(request, produce)
