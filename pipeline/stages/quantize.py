"""quantize: HF dir (from fetch) -> modelopt PTQ -> quantized TensorRT-LLM checkpoint + ppl gate.

quant=none returns convert's checkpoint (what build uses unquantized). Every check a config can
fail (recipe keys, target GPU, TP/PP split, block sizes, calibration sizes) runs before the
model is loaded (pipeline.quant.preflight); calibration text, model and modelopt come after.
"""

import copy
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

from pipeline.artifacts import (
    StageRequest,
    file_stat_fingerprint,
    produce_artifact,
    verify_outputs,
)
from pipeline.errors import ConfigError
from pipeline.quant import gate, preflight
from pipeline.quant.recipes import Recipe, check_export_labels
from pipeline.specs.pipeline import PipelineSpec
from pipeline.stages import convert, fetch, forced

log = logging.getLogger(__name__)


def _quantize_and_export(
    spec, recipe: Recipe, hf_config: dict, model, windows, out_dir: Path
) -> tuple[dict, float, float]:
    """Calibrate the model in place and export it; (checkpoint config, quantize s, export s)."""
    from pipeline.checkpoint.architectures import architecture_of
    from pipeline.quant import export, ptq

    quant, par = spec.quant, spec.parallel
    timer = time.perf_counter()
    ptq.quantize(
        model,
        ptq.modelopt_config(recipe, quant, on_cpu=ptq.device().type == "cpu"),
        windows.calib,
        quant.batch_size,
    )
    quantize_s, timer = time.perf_counter() - timer, time.perf_counter()
    # each exporter edits the model it is given (merged fused-GEMM scales, folded AWQ scales)
    hf_model = copy.deepcopy(model) if quant.export_hf else None
    ckpt_config = export.export_trtllm(
        model,
        architecture_of(hf_config, "quantize"),
        hf_config,
        quant.export_dtype,
        par.tp_size,
        par.pp_size,
        out_dir,
        recipe.quant_algo if recipe.build_quantizes_bits else None,
    )
    if hf_model is not None:
        export.export_hf(hf_model, quant.export_dtype, out_dir / "hf")
    check_export_labels(recipe, quant.kv_cache, ckpt_config["quantization"])
    return ckpt_config, quantize_s, time.perf_counter() - timer


def _quantized_logits(gate_runtime: str, model, ckpt_dir: Path):
    """(logits fn, what it runs) for the quantized perplexity."""
    from pipeline.quant.perplexity import hf_logits_fn

    if gate_runtime == "engine":
        from pipeline.quant.engine_ppl import engine_logits_fn
        from pipeline.quant.ptq import device

        return engine_logits_fn(ckpt_dir, device()), "torch engine (export)"
    # the TRT-LLM export merged the fused-GEMM scales (q/k/v, gate/up) into the model in place,
    # so this fake-quant forward computes with the exported scales
    return hf_logits_fn(model), "modelopt fake-quant (HF model)"


def _produce(
    spec, recipe: Recipe, hf_dir: Path, hf_config: dict, out_dir: Path, artifact_dir: Path
) -> dict:
    import torch
    from transformers import AutoTokenizer

    from pipeline.quant import ptq
    from pipeline.quant.calibration import build_windows
    from pipeline.quant.perplexity import hf_logits_fn, perplexity

    quant = spec.quant
    verify_outputs(hf_dir)
    windows = build_windows(AutoTokenizer.from_pretrained(hf_dir), quant)
    model = ptq.load_model(hf_dir, getattr(torch, quant.export_dtype))
    timer = time.perf_counter()
    ppl_reference = perplexity(
        hf_logits_fn(model), windows.eval, quant.batch_size, "quantize: reference ppl"
    )
    eval_s = time.perf_counter() - timer
    ckpt_config, quantize_s, export_s = _quantize_and_export(
        spec, recipe, hf_config, model, windows, out_dir
    )
    timer = time.perf_counter()
    logits_fn, runtime = _quantized_logits(quant.gate_runtime, model, out_dir)
    ppl_quantized = perplexity(logits_fn, windows.eval, quant.batch_size, "quantize: quantized ppl")
    quantization = ckpt_config["quantization"]
    report = gate.QualityReport(
        recipe=recipe.name,
        kv_cache=quant.kv_cache,
        quant_algo=quantization["quant_algo"],
        kv_cache_quant_algo=quantization.get("kv_cache_quant_algo"),
        export_dtype=quant.export_dtype,
        runtime=runtime,
        num_eval_windows=windows.eval.shape[0],
        num_eval_tokens=windows.eval.shape[0] * (windows.eval.shape[1] - 1),
        ppl_reference=ppl_reference,
        ppl_quantized=ppl_quantized,
        quantize_s=round(quantize_s, 2),
        export_s=round(export_s, 2),
        eval_s=round(eval_s + time.perf_counter() - timer, 2),
        max_ppl_increase_pct=quant.max_ppl_increase_pct,
    )
    gate.write_report(report, out_dir)
    extra = {
        "recipe": recipe.name,
        "modelopt_config": recipe.modelopt_config,
        "quantization": quantization,
        "dtype": quant.export_dtype,
        "dtype_reason": "quant.export_dtype: model loaded in it before calibration; "
        "unquantized tensors and config.json dtype say the same",
        "calibration": {
            "source": windows.source,
            "num_text_tokens": windows.num_text_tokens,
            "num_windows": windows.calib.shape[0],
            "seq_len": quant.seq_len,
        },
        "hf_dir": str(hf_dir),
        "world_size": ckpt_config["mapping"]["world_size"],
        "report": report.to_dict(),
    }
    log.info(
        "quantize: %s ppl %.3f -> %.3f (%+.2f%%, %s)",
        recipe.name,
        ppl_reference,
        ppl_quantized,
        report.ppl_increase_pct,
        runtime,
    )
    gate.enforce(report, artifact_dir, extra)
    return extra


def run(spec: PipelineSpec) -> Path:
    quant = spec.quant
    if quant.name == "none":
        if quant.kv_cache != "none":
            raise ConfigError(
                f"quantize: quant.kv_cache={quant.kv_cache} needs a modelopt recipe "
                f"(quant=none builds from convert's unquantized checkpoint); pick "
                f"a recipe such as quant=fp8, or set quant.kv_cache=none"
            )
        return convert.run(spec)
    recipe, calib_file = preflight.check_config(spec)
    hf_dir = fetch.run(spec)
    hf_config = json.loads((hf_dir / "config.json").read_text())
    preflight.check_model(spec, recipe, hf_dir, hf_config)
    request = StageRequest(
        workdir=Path(spec.workdir),
        model=spec.model.name,
        stage="quantize",
        config={
            "quant": asdict(quant),
            "tp_size": spec.parallel.tp_size,
            "pp_size": spec.parallel.pp_size,
            # weight-only recipes export one format per backend (pipeline.quant.recipes)
            **({"quant_algo": recipe.quant_algo} if recipe.build_quantizes_bits else {}),
        },
        upstream={"hf_dir": hf_dir},
        force=forced(spec, "quantize"),
        # an edited calibration file re-runs the stage
        fingerprint_extra=file_stat_fingerprint([calib_file]) if calib_file else None,
    )
    log.info(
        "quantize: %s (%s) kv_cache=%s export %s tp=%d pp=%d gate on %s",
        recipe.name,
        recipe.quant_algo,
        quant.kv_cache,
        quant.export_dtype,
        spec.parallel.tp_size,
        spec.parallel.pp_size,
        quant.gate_runtime,
    )
    return produce_artifact(
        request,
        lambda out_dir: _produce(spec, recipe, hf_dir, hf_config, out_dir, request.artifact_dir),
    )
