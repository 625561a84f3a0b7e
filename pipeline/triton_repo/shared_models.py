"""Config protobufs of the four models both backends share: pre/postprocessing, ensemble, BLS."""

from dataclasses import replace
from pathlib import Path

from pipeline.specs.deploy import DeploySpec
from pipeline.triton_repo import interface as io
from pipeline.triton_repo import model_config as mcfg


def _batching(cfg, deploy: DeploySpec, max_batch_size: int) -> None:
    mcfg.set_dynamic_batching(
        cfg,
        deploy.preferred_batch_sizes or (max_batch_size,),
        deploy.max_queue_delay_microseconds,
        deploy.max_queue_size,
    )


def preprocessing(deploy: DeploySpec, max_batch_size: int, tokenizer_dir: Path):
    cfg = mcfg.new_config("preprocessing", max_batch_size, backend="python")
    mcfg.add_inputs(cfg, io.PREPROCESSING_INPUTS)
    mcfg.add_outputs(cfg, io.PREPROCESSING_OUTPUTS)
    mcfg.set_parameters(
        cfg, {"tokenizer_dir": tokenizer_dir, "add_special_tokens": deploy.add_special_tokens}
    )
    _batching(cfg, deploy, max_batch_size)
    mcfg.set_cpu_instances(cfg, deploy.preprocessing_instance_count)
    return cfg


def postprocessing(deploy: DeploySpec, max_batch_size: int, tokenizer_dir: Path):
    cfg = mcfg.new_config("postprocessing", max_batch_size, backend="python")
    mcfg.add_inputs(cfg, io.POSTPROCESSING_INPUTS)
    mcfg.add_outputs(cfg, io.POSTPROCESSING_OUTPUTS)
    mcfg.set_parameters(
        cfg, {"tokenizer_dir": tokenizer_dir, "skip_special_tokens": deploy.skip_special_tokens}
    )
    _batching(cfg, deploy, max_batch_size)
    mcfg.set_cpu_instances(cfg, deploy.postprocessing_instance_count)
    return cfg


def ensemble(
    max_batch_size: int, is_llm_tokenizing: bool, is_llm_detokenizing: bool, logits_type: str
):
    """Triton marks the ensemble decoupled by itself when `tensorrt_llm` is. is_llm_tokenizing /
    is_llm_detokenizing: `tensorrt_llm` itself takes text_input / makes text_output, in place of
    the preprocessing / postprocessing step. logits_type: the data type of `tensorrt_llm`'s
    logits outputs."""
    cfg = mcfg.new_config("ensemble", max_batch_size, platform="ensemble")
    # Triton 2.51 checks a request's required inputs by their number only: text_input left out
    # but stream sent passes, and the ensemble never runs a step that waits for a missing input
    # (an empty final response, no error). Declared optional, a missing input reaches the first
    # step, whose model refuses the request naming it.
    mcfg.add_inputs(cfg, (replace(spec, optional=True) for spec in io.ENSEMBLE_INPUTS))
    mcfg.add_outputs(cfg, io.with_logits_type(io.ENSEMBLE_OUTPUTS, logits_type))
    for model_name, input_map, output_map in io.ensemble_steps(
        is_llm_tokenizing, is_llm_detokenizing
    ):
        step = cfg.ensemble_scheduling.step.add(model_name=model_name, model_version=-1)
        step.input_map.update(input_map)
        step.output_map.update(output_map)
    return cfg


# tensorrt_llm_bls's draft-target parameters: upstream's, then the default num_draft_tokens of a
# request and the target engine's max_draft_len
DRAFT_PARAMETERS = ("tensorrt_llm_draft_model_name", "num_draft_tokens", "max_draft_len")


def bls(
    deploy: DeploySpec,
    max_batch_size: int,
    is_llm_detokenizing: bool,
    logits_type: str,
    draft: tuple[str, int, int] | None = None,
):
    """draft: the draft model's name, the default num_draft_tokens and the target engine's
    max_draft_len (draft-target speculative decoding), or None."""
    cfg = mcfg.new_config("tensorrt_llm_bls", max_batch_size, backend="python")
    mcfg.add_inputs(cfg, io.BLS_INPUTS)
    mcfg.add_outputs(cfg, io.with_logits_type(io.ENSEMBLE_OUTPUTS, logits_type))
    mcfg.set_parameters(
        cfg,
        {
            "accumulate_tokens": deploy.accumulate_tokens,
            "tensorrt_llm_model_name": "tensorrt_llm",
            "llm_text_output": is_llm_detokenizing,
            # upstream's draft parameter, then the pipeline's two
            **(dict(zip(DRAFT_PARAMETERS, draft, strict=True)) if draft else {}),
        },
    )
    mcfg.set_decoupled(cfg, deploy.decoupled_mode)
    mcfg.set_cpu_instances(cfg, deploy.bls_instance_count)
    return cfg
