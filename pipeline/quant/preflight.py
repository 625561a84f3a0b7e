"""Every check a quantize config can fail, run before the model or modelopt is loaded."""

import logging
from pathlib import Path

from pipeline.checkpoint.architectures import architecture_of
from pipeline.checkpoint.sharding import check_mapping
from pipeline.errors import ConfigError
from pipeline.hardware import target_sm
from pipeline.quant import shapes
from pipeline.quant.calibration import check_sizes, dataset_file
from pipeline.quant.recipes import Recipe, check_target, recipe_for
from pipeline.specs.pipeline import PipelineSpec

log = logging.getLogger(__name__)

GATE_RUNTIMES = ("fake_quant", "engine")


def _check_target(spec: PipelineSpec, recipe: Recipe) -> None:
    if spec.backend.name != "trtllm":
        return  # the torch engine refuses what it cannot run itself, at build
    sm = target_sm(spec.hardware)
    if sm is None:
        log.warning(
            "quantize: hardware=%s names no GPU, so %s is not checked against the "
            "TensorRT-LLM target; set hardware=<gpu> (e.g. h100)",
            spec.hardware,
            recipe.name,
        )
        return
    check_target(recipe, spec.quant.kv_cache, sm, spec.hardware)


def check_config(spec: PipelineSpec) -> tuple[Recipe, Path | None]:
    """(recipe, local calibration file or None) for a quant config, or a ConfigError."""
    quant = spec.quant
    recipe = recipe_for(quant, spec.backend.name)
    check_sizes(quant)
    if quant.gate_runtime not in GATE_RUNTIMES:
        raise ConfigError(
            f"quantize: quant.gate_runtime={quant.gate_runtime!r}; use one of "
            f"{', '.join(GATE_RUNTIMES)}"
        )
    if quant.gate_runtime == "engine":
        from pipeline.quant.engine_ppl import check_engine_gate

        check_engine_gate(recipe, quant.kv_cache, spec.parallel.tp_size, spec.parallel.pp_size)
    _check_target(spec, recipe)
    return recipe, dataset_file(quant.calib_dataset)


def check_model(spec: PipelineSpec, recipe: Recipe, hf_dir: Path, hf_config: dict) -> None:
    """Architecture, TP/PP split and block sizes of the fetched model (headers only)."""
    par = spec.parallel
    architecture_of(hf_config, "quantize")
    check_mapping(hf_config, par.tp_size, par.pp_size, "quantize")
    shapes.check_pipeline_split(hf_config["num_hidden_layers"], par.pp_size)
    block_size = recipe.fixed_block_size or (
        spec.quant.block_size if recipe.uses_block_size else None
    )
    if spec.backend.name == "trtllm":
        shapes.check_trtllm_padding(
            hf_config, recipe.quant_algo, block_size, par.tp_size, recipe.name
        )
    if block_size is not None:
        shapes.check_block_size(
            shapes.decoder_linear_shapes(hf_dir),
            block_size,
            par.tp_size,
            recipe.name,
            is_fixed=recipe.fixed_block_size is not None,
        )
