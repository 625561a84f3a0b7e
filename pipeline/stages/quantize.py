"""quantize: HF dir (from fetch) -> modelopt PTQ -> quantized TensorRT-LLM checkpoint + ppl gate.

quant=none returns convert's checkpoint (what build uses unquantized). Every check a config can
fail (recipe keys, target GPU, TP/PP split, block sizes, calibration sizes) runs before the
model is loaded; calibration text, model and modelopt come after.
"""

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

import torch

from pipeline.artifacts import (
    StageRequest,
    file_stat_fingerprint,
    produce_artifact,
    verify_outputs,
)
from pipeline.checkpoint.architectures import architecture_of
from pipeline.checkpoint.sharding import check_mapping
from pipeline.errors import ConfigError
from pipeline.hardware import target_sm
from pipeline.quant import gate, shapes
from pipeline.quant.calibration import check_sizes, dataset_file
from pipeline.quant.recipes import Recipe, check_export_labels, check_target, recipe_for
from pipeline.stages import convert, fetch

log = logging.getLogger(__name__)


def _check_target(spec, recipe: Recipe) -> None:
    if spec.backend.name != "trtllm":
        return  # the torch engine runs every format (dequantizing where the GPU cannot)
    sm = target_sm(spec.hardware)
    if sm is None:
        log.warning("quantize: hardware=%s names no GPU, so %s is not checked against the "
                    "TensorRT-LLM target; set hardware=<gpu> (e.g. h100)", spec.hardware,
                    recipe.name)
        return
    check_target(recipe, spec.quant.kv_cache, sm, spec.hardware)


def _check_shapes(hf_dir: Path, hf_config: dict, recipe: Recipe, spec) -> None:
    par = spec.parallel
    check_mapping(hf_config, par.tp_size, par.pp_size, "quantize")
    shapes.check_pipeline_split(hf_config["num_hidden_layers"], par.pp_size)
    block_size = recipe.fixed_block_size or (spec.quant.block_size if recipe.uses_block_size
                                             else None)
    if block_size is not None:
        shapes.check_block_size(shapes.decoder_linear_shapes(hf_dir), block_size, par.tp_size,
                                recipe.name, is_fixed=recipe.fixed_block_size is not None)


def _produce(spec, recipe: Recipe, hf_dir: Path, hf_config: dict, out_dir: Path,
             artifact_dir: Path) -> dict:
    from transformers import AutoTokenizer

    from pipeline.quant import export, ptq
    from pipeline.quant.calibration import build_windows
    from pipeline.quant.perplexity import hf_logits_fn, perplexity

    quant, par = spec.quant, spec.parallel
    verify_outputs(hf_dir)
    windows = build_windows(AutoTokenizer.from_pretrained(hf_dir), quant)
    model = ptq.load_model(hf_dir, getattr(torch, quant.export_dtype))
    start = time.perf_counter()
    ppl_reference = perplexity(hf_logits_fn(model), windows.eval, quant.batch_size,
                               "quantize: reference ppl")
    eval_s = time.perf_counter() - start
    start = time.perf_counter()
    config = ptq.modelopt_config(recipe, quant, on_cpu=ptq.device().type == "cpu")
    ptq.quantize(model, config, windows.calib, quant.batch_size)
    quantize_s = time.perf_counter() - start
    start = time.perf_counter()
    ckpt_config = export.export_trtllm(model, architecture_of(hf_config, "quantize"), hf_config,
                                       quant.export_dtype, par.tp_size, par.pp_size, out_dir)
    export_s = time.perf_counter() - start
    # after the export: it merges fused-GEMM scales (q/k/v, gate/up) in the model in place, so
    # the fake-quant forward now computes with the exported scales
    start = time.perf_counter()
    ppl_quantized = perplexity(hf_logits_fn(model), windows.eval, quant.batch_size,
                               "quantize: quantized ppl")
    eval_s += time.perf_counter() - start
    if quant.export_hf:
        start = time.perf_counter()
        export.export_hf(model, quant.export_dtype, out_dir / "hf")
        export_s += time.perf_counter() - start
    quantization = ckpt_config["quantization"]
    check_export_labels(recipe, quant.kv_cache, quantization)
    report = gate.QualityReport(
        recipe=recipe.name, kv_cache=quant.kv_cache, quant_algo=quantization["quant_algo"],
        kv_cache_quant_algo=quantization.get("kv_cache_quant_algo"),
        export_dtype=quant.export_dtype, runtime="modelopt fake-quant (HF model)",
        num_eval_windows=windows.eval.shape[0],
        num_eval_tokens=windows.eval.shape[0] * (windows.eval.shape[1] - 1),
        ppl_reference=ppl_reference, ppl_quantized=ppl_quantized, quantize_s=round(quantize_s, 2),
        export_s=round(export_s, 2), eval_s=round(eval_s, 2),
        max_ppl_increase_pct=quant.max_ppl_increase_pct)
    gate.write_report(report, out_dir)
    extra = {"recipe": recipe.name, "modelopt_config": recipe.modelopt_config,
             "quantization": quantization, "dtype": quant.export_dtype,
             "dtype_reason": "quant.export_dtype: model loaded in it before calibration; "
                             "unquantized tensors and config.json dtype say the same",
             "calibration": {"source": windows.source, "num_text_tokens": windows.num_text_tokens,
                             "num_windows": windows.calib.shape[0], "seq_len": quant.seq_len},
             "hf_dir": str(hf_dir), "world_size": ckpt_config["mapping"]["world_size"],
             "report": report.to_dict()}
    log.info("quantize: %s ppl %.3f -> %.3f (%+.2f%%)", recipe.name, ppl_reference,
             ppl_quantized, report.ppl_increase_pct)
    gate.enforce(report, artifact_dir, extra)
    return extra


def run(spec) -> Path:
    quant = spec.quant
    if quant.name == "none":
        if quant.kv_cache != "none":
            raise ConfigError(f"quantize: quant.kv_cache={quant.kv_cache} needs a modelopt recipe "
                              f"(quant=none builds from convert's unquantized checkpoint); pick "
                              f"a recipe such as quant=fp8, or set quant.kv_cache=none")
        return convert.run(spec)
    recipe = recipe_for(quant)
    check_sizes(quant)
    calib_file = dataset_file(quant.calib_dataset)
    _check_target(spec, recipe)
    hf_dir = fetch.run(spec)
    hf_config = json.loads((hf_dir / "config.json").read_text())
    architecture_of(hf_config, "quantize")
    _check_shapes(hf_dir, hf_config, recipe, spec)
    request = StageRequest(
        workdir=Path(spec.workdir), model=spec.model.name, stage="quantize",
        config={"quant": asdict(quant), "tp_size": spec.parallel.tp_size,
                "pp_size": spec.parallel.pp_size},
        upstream={"hf_dir": hf_dir}, force=spec.force,
        # an edited calibration file re-runs the stage
        fingerprint_extra=file_stat_fingerprint([calib_file]) if calib_file else None,
    )
    log.info("quantize: %s (%s) kv_cache=%s export %s tp=%d pp=%d", recipe.name,
             recipe.quant_algo, quant.kv_cache, quant.export_dtype, spec.parallel.tp_size,
             spec.parallel.pp_size)
    return produce_artifact(request, lambda out_dir: _produce(
        spec, recipe, hf_dir, hf_config, out_dir, request.artifact_dir))
