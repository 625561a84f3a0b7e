"""The `tensorrt_llm` model for backend=torch: a decoupled python-backend model hosting the engine.

Same inputs/outputs as the tensorrtllm backend's model, plus text_input/stop_words/bad_words and
text_output (ours: the model tokenizes and detokenizes, so the torch backend's ensemble needs no
preprocessing or postprocessing step). One engine, one KV cache: concurrent Triton requests are
batched in flight by the engine's scheduler, not by Triton. With the engine in a process of its
own, several instances share it (instance_count).
"""

import shutil
from pathlib import Path

import pipeline
from pipeline.errors import ConfigError
from pipeline.specs.deploy import DeploySpec
from pipeline.specs.lora import LoraSpec
from pipeline.triton_models import SERVED
from pipeline.triton_models.engine_runtime import runtime_parameters
from pipeline.triton_models.lora_parameters import lora_parameters
from pipeline.triton_repo import interface as io
from pipeline.triton_repo import model_config as mcfg
from pipeline.triton_repo.engine_info import EngineInfo, triton_max_batch_size

MODEL_SOURCE = SERVED / "python_models" / "torch_llm.py"
# imported by the model from beside it
MODEL_MODULES = (SERVED / "python_models" / "llm_responses.py",)
# stub processes on a GPU: one stub's GIL capped the served rate of a fast engine (SmolLM2 on an
# H100); a CPU engine is slower than one stub
AUTO_GPU_INSTANCES = 4


def instance_count(deploy: DeploySpec, device: str) -> int:
    """deploy.torch.instances, or for 0: AUTO_GPU_INSTANCES where the engine runs on a GPU (with
    its own process), else 1."""
    opts = deploy.torch
    if opts.instances < 0:
        raise ConfigError(
            f"deploy: deploy.torch.instances={opts.instances} must be >= 0 (0 = auto)"
        )
    if opts.instances > 1 and not opts.engine_process:
        raise ConfigError(
            f"deploy: deploy.torch.instances={opts.instances} needs "
            f"deploy.torch.engine_process=true (the instances share the engine's process); set "
            f"it, or instances=1"
        )
    if opts.instances:
        return opts.instances
    if not opts.engine_process:
        return 1
    import torch

    is_gpu = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    return AUTO_GPU_INSTANCES if is_gpu else 1


def _check_restarts(deploy: DeploySpec) -> None:
    opts = deploy.torch
    if opts.max_engine_restarts < 0 or opts.restart_window_s <= 0:
        raise ConfigError(
            f"deploy: deploy.torch.max_engine_restarts={opts.max_engine_restarts} must be >= 0 "
            f"and deploy.torch.restart_window_s={opts.restart_window_s} > 0"
        )


def model_config(
    engine_dir: Path, tokenizer_dir: Path, deploy: DeploySpec, device: str, lora: LoraSpec
):
    _check_restarts(deploy)
    engine = EngineInfo.read(engine_dir)
    max_batch_size = triton_max_batch_size(deploy, engine)
    cfg = mcfg.new_config("tensorrt_llm", max_batch_size, backend="python")
    mcfg.add_inputs(cfg, io.TORCH_LLM_INPUTS)
    mcfg.add_outputs(cfg, io.TORCH_LLM_OUTPUTS)
    mcfg.set_decoupled(cfg, deploy.decoupled_mode)
    mcfg.set_dynamic_batching(
        cfg,
        deploy.preferred_batch_sizes or (max_batch_size,),
        deploy.max_queue_delay_microseconds,
        deploy.max_queue_size,
    )
    mcfg.set_cpu_instances(cfg, instance_count(deploy, device))
    mcfg.set_parameters(
        cfg,
        {
            "engine_dir": Path(engine_dir).resolve(),
            "tokenizer_dir": Path(tokenizer_dir).resolve(),  # as pre/postprocessing's
            "add_special_tokens": deploy.add_special_tokens,
            "skip_special_tokens": deploy.skip_special_tokens,
            "device": device,
            "exclude_input_in_output": deploy.exclude_input_in_output,
            **runtime_parameters(deploy),  # the engine's, as the direct bench runs it
            **lora_parameters(lora),
            "num_threads": deploy.torch.num_threads,
            "coalesce_stream": deploy.torch.coalesce_stream,
            "max_response_rate": deploy.torch.max_response_rate,
            "response_lanes": deploy.torch.response_lanes,
            "engine_process": deploy.torch.engine_process,
            "max_engine_restarts": deploy.torch.max_engine_restarts,
            "restart_window_s": deploy.torch.restart_window_s,
            # the stub imports this checkout's pipeline package, whatever is installed in the venv
            "python_path": Path(pipeline.__file__).resolve().parent.parent,
        },
    )
    return cfg


def write(
    engine_dir: Path,
    tokenizer_dir: Path,
    model_dir: Path,
    *,
    deploy: DeploySpec | None = None,
    device: str = "auto",
    lora: LoraSpec | None = None,
) -> str:
    """Write model_dir/{config.pbtxt, 1/model.py}; return the config text."""
    text = mcfg.render(
        model_config(
            Path(engine_dir),
            Path(tokenizer_dir),
            deploy or DeploySpec(),
            device,
            lora or LoraSpec(),
        )
    )
    version_dir = Path(model_dir) / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(MODEL_SOURCE, version_dir / "model.py")
    for module in MODEL_MODULES:
        shutil.copyfile(module, version_dir / module.name)
    (Path(model_dir) / "config.pbtxt").write_text(text)
    return text
