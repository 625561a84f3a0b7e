"""The repository's `tensorrt_llm` model for the tensorrtllm backend: config.pbtxt from the engine.

Values come from the engine's config.json (beam width, batch size, logits dtype) and the deploy
spec (runtime knobs). Refused before writing anything: an engine built by another TensorRT-LLM
version than the serving container's, an engine that cannot do in-flight batching, runtime KV reuse
or chunked context on an engine without paged context FMHA, an engine built for another GPU.
"""

from dataclasses import dataclass

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.engine_json import EngineJson
from pipeline.errors import ConfigError
from pipeline.lora.trtllm import cache_parameters as lora_cache_parameters
from pipeline.lora.trtllm import engine_problems as lora_engine_problems
from pipeline.specs.deploy import DeploySpec
from pipeline.specs.lora import LoraSpec
from pipeline.trtllm.draft_target import target_problems
from pipeline.trtllm.guided_decoding import check_backend
from pipeline.trtllm.memory_settings import deploy_problems, kv_cache_reuse, memory_params
from pipeline.trtllm.triton_io import INPUTS, OUTPUTS

MODEL_NAME = "tensorrt_llm"
EXECUTOR_WORKER = "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"
BATCHING_STRATEGIES = ("inflight_fused_batching", "inflight_batching")  # V1 is gone since 0.20
SCHEDULER_POLICIES = ("max_utilization", "guaranteed_no_evict")
LOGITS_TYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "bfloat16": "TYPE_BF16"}


@dataclass(frozen=True, slots=True)
class ServingTarget:
    """Where the engine will be served: the container's TensorRT-LLM and the GPU, if known."""

    trtllm_version: str  # build.trtllm.trtllm_version
    container_image: str
    sm: int | None  # target_sm(hardware); None = unknown
    hardware: str


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _engine_problems(
    engine: EngineJson, deploy: DeploySpec, target: ServingTarget, built_sm: int | None
) -> list[str]:
    where = f"engine {engine.engine_dir}"
    out = []
    if engine.version != target.trtllm_version:
        out.append(
            f"{where} was built by TensorRT-LLM {engine.version}, but the serving "
            f"container ({target.container_image}) runs {target.trtllm_version} "
            f"(build.trtllm.trtllm_version) and TensorRT plans only load in the version "
            f"that built them; rebuild with `make build BACKEND=trtllm DOCKER=1`"
        )
    if (
        not engine.is_plugin_enabled("gpt_attention_plugin")
        or not engine.plugin.get("remove_input_padding")
        or not engine.is_paged_kv_cache
    ):
        out.append(
            f"{where}: in-flight batching needs gpt_attention_plugin + remove_input_padding "
            f"+ a paged KV cache; rebuild with the build.trtllm defaults"
        )
    wanted = {
        "enable_kv_cache_reuse": kv_cache_reuse(deploy),
        "enable_chunked_context": deploy.trtllm.enable_chunked_context,
    }
    runtime = [k for k, on in wanted.items() if on]
    if runtime and not (
        engine.plugin.get("use_paged_context_fmha") and engine.plugin.get("context_fmha")
    ):
        out.append(
            f"deploy.trtllm.{'/'.join(runtime)}=true: {where} was built without paged "
            f"context FMHA; rebuild with build.trtllm.use_paged_context_fmha=enable or set "
            f"them false"
        )
    if built_sm is not None and target.sm is not None and built_sm != target.sm:
        out.append(
            f"hardware={target.hardware}: {where} was built on SM {built_sm}, TensorRT "
            f"plans only run on that architecture (target SM {target.sm}); rebuild on the "
            f"serving GPU"
        )
    return out


def _deploy_problems(deploy: DeploySpec, engine: EngineJson) -> list[str]:
    out, engine_batch = [], int(engine.build["max_batch_size"])
    if deploy.trtllm.batching_strategy not in BATCHING_STRATEGIES:
        out.append(
            f"deploy.trtllm.batching_strategy={deploy.trtllm.batching_strategy!r}: use one "
            f"of {', '.join(BATCHING_STRATEGIES)}"
        )
    if deploy.batch_scheduler_policy not in SCHEDULER_POLICIES:
        out.append(
            f"deploy.batch_scheduler_policy={deploy.batch_scheduler_policy!r}: use one of "
            f"{', '.join(SCHEDULER_POLICIES)}"
        )
    if not 0.0 < deploy.trtllm.kv_cache_free_gpu_mem_fraction <= 1.0:
        out.append(
            f"deploy.trtllm.kv_cache_free_gpu_mem_fraction="
            f"{deploy.trtllm.kv_cache_free_gpu_mem_fraction}: must be in (0, 1]"
        )
    if deploy.triton_max_batch_size > engine_batch:
        out.append(
            f"deploy.triton_max_batch_size={deploy.triton_max_batch_size}: above the "
            f"engine's max_batch_size={engine_batch}, which caps the runtime anyway; set "
            f"it <= {engine_batch} (0 = the engine's)"
        )
    out += check_backend(deploy.trtllm.guided_decoding_backend)
    logits_dtype = engine.pretrained.get("logits_dtype", "float32")
    if logits_dtype not in LOGITS_TYPES:
        out.append(
            f"engine pretrained_config.logits_dtype={logits_dtype!r}: unsupported; "
            f"rebuild with --logits_dtype float32"
        )
    return out


def _add_tensors(config: mc.ModelConfig, logits_type: str) -> None:
    placeholders = {"LOGITS": logits_type, "FEATURES": "TYPE_FP16", "PROMPT_TABLE": "TYPE_FP16"}
    for name, dtype, dims, flags in INPUTS:
        tensor = config.input.add(
            name=name, dims=dims, allow_ragged_batch="g" in flags, optional="o" in flags
        )
        tensor.data_type = mc.DataType.Value(placeholders.get(dtype, dtype))
        if "r" in flags:
            tensor.reshape.SetInParent()  # reshape: { shape: [ ] } = a per-request scalar
    for name, dtype, dims in OUTPUTS:
        config.output.add(
            name=name, dims=dims, data_type=mc.DataType.Value(placeholders.get(dtype, dtype))
        )


def tensorrt_llm_config(
    engine: EngineJson,
    deploy: DeploySpec,
    target: ServingTarget,
    built_sm: int | None = None,
    gpu_weight_budget_gb: float | None = None,
    lora: LoraSpec | None = None,
    tokenizer_info_path: str = "",
    model_name: str = MODEL_NAME,
) -> str:
    """config.pbtxt text of the `tensorrt_llm` model; ConfigError listing every refusal reason.
    gpu_weight_budget_gb: build.gpu_weight_budget_gb (gpu_weights_percent); tokenizer_info_path:
    the xgrammar tokenizer info guided decoding reads ("" when off); model_name: another name
    for the same model of another engine (a draft model)."""
    problems = _engine_problems(engine, deploy, target, built_sm) + _deploy_problems(deploy, engine)
    if model_name == MODEL_NAME:
        problems += target_problems(engine, deploy.trtllm.spec)
    problems += deploy_problems(engine, deploy, gpu_weight_budget_gb)
    lora = lora or LoraSpec()
    problems += lora_engine_problems(engine, lora)
    if problems:
        raise ConfigError(
            "deploy: backend=trtllm cannot serve this engine: "
            + "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
        )
    batch = deploy.triton_max_batch_size or int(engine.build["max_batch_size"])
    config = mc.ModelConfig(name=model_name, backend="tensorrtllm", max_batch_size=batch)
    config.model_transaction_policy.decoupled = deploy.decoupled_mode
    batching = config.dynamic_batching
    batching.preferred_batch_size.extend(deploy.preferred_batch_sizes or (batch,))
    batching.max_queue_delay_microseconds = deploy.max_queue_delay_microseconds
    batching.default_queue_policy.max_queue_size = deploy.max_queue_size
    _add_tensors(config, LOGITS_TYPES[engine.pretrained.get("logits_dtype", "float32")])
    config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    params = {
        "max_beam_width": str(engine.build["max_beam_width"]),
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "gpt_model_type": deploy.trtllm.batching_strategy,
        "gpt_model_path": str(engine.engine_dir.resolve()),
        "batch_scheduler_policy": deploy.batch_scheduler_policy,
        "kv_cache_free_gpu_mem_fraction": str(deploy.trtllm.kv_cache_free_gpu_mem_fraction),
        "enable_kv_cache_reuse": _bool(kv_cache_reuse(deploy)),
        "enable_chunked_context": _bool(deploy.trtllm.enable_chunked_context),
        "exclude_input_in_output": _bool(deploy.exclude_input_in_output),
        "executor_worker_path": EXECUTOR_WORKER,
        "guided_decoding_backend": deploy.trtllm.guided_decoding_backend,
        "xgrammar_tokenizer_info_path": tokenizer_info_path,
    }
    if deploy.trtllm.max_tokens_in_paged_kv_cache > 0:
        params["max_tokens_in_paged_kv_cache"] = str(deploy.trtllm.max_tokens_in_paged_kv_cache)
    params |= memory_params(engine, deploy, gpu_weight_budget_gb)
    params |= lora_cache_parameters(lora)
    for key, value in params.items():
        config.parameters[key].string_value = value
    header = (
        f"# generated by llm-pipeline from {engine.engine_dir.resolve()}/config.json "
        f"(TensorRT-LLM {engine.version}); do not edit\n"
    )
    return header + text_format.MessageToString(config)
