"""Where the tensorrt_llm model keeps KV blocks and weights: reuse, the host KV tier, weight
streaming, from the keys the torch engine reads too (docs/trtllm_reference.md, section 5.5).

- KV block reuse: `enable_kv_cache_reuse` is deploy.trtllm.enable_kv_cache_reuse, or when that is
  unset, deploy.enable_prefix_caching. The engine needs paged context FMHA (section 2.4).
- Host KV tier: `kv_cache_host_memory_bytes` = deploy.host_kv_cache_gb x 10^9. Blocks evicted
  from the GPU go there and stay reusable until evicted from it, so the tier serves reuse only.
- Weight streaming: an engine built with `--weight_streaming` keeps `gpu_weights_percent` of its
  streamable weights on the GPU; the percent is build.gpu_weight_budget_gb over the largest
  rank<N>.engine (a plan holds its weights and kernels, so the percent errs toward the GPU).
  Weights inside plugins do not stream: the GEMM plugin and weight-only quantization's plugins
  are refused with a budget.
"""

from pipeline.engine_json import EngineJson
from pipeline.specs.build import BuildSpec
from pipeline.specs.deploy import DeploySpec

GB = 1e9
# quant_algos whose linears run in weight-only plugins (docs/trtllm_reference.md, section 2.2)
PLUGIN_QUANT_ALGOS = ("W8A16", "W4A16", "W4A16_AWQ", "W4A8_AWQ", "W8A16_GPTQ", "W4A16_GPTQ")


def kv_cache_reuse(deploy: DeploySpec) -> bool:
    """KV block reuse: deploy.trtllm.enable_kv_cache_reuse, else the shared prefix-caching key."""
    if deploy.trtllm.enable_kv_cache_reuse is not None:
        return deploy.trtllm.enable_kv_cache_reuse
    return deploy.enable_prefix_caching


def weight_streaming(build: BuildSpec) -> bool:
    """trtllm-build gets --weight_streaming: asked for, or implied by a GPU weight budget."""
    return build.trtllm.weight_streaming or build.gpu_weight_budget_gb is not None


def build_problems(build: BuildSpec, quant_algo: str | None) -> list[str]:
    """What a weight-streaming build cannot stream (preflight's rule)."""
    if not weight_streaming(build):
        return []
    key = (
        f"build.gpu_weight_budget_gb={build.gpu_weight_budget_gb:g}"
        if build.gpu_weight_budget_gb is not None
        else "build.trtllm.weight_streaming=true"
    )
    out = []
    if build.gpu_weight_budget_gb is not None and build.gpu_weight_budget_gb <= 0:
        out.append(f"{key}: must be > 0 (null: every weight on the GPU)")
    if build.trtllm.gemm_plugin != "disable":
        out.append(
            f"{key}: TensorRT streams only weights outside plugins, and "
            f"build.trtllm.gemm_plugin={build.trtllm.gemm_plugin} puts the GEMMs' in one; set "
            f"gemm_plugin=disable"
        )
    if quant_algo in PLUGIN_QUANT_ALGOS:
        out.append(
            f"{key}: quant_algo={quant_algo} runs its linears in weight-only quantization "
            f"plugins, whose weights TensorRT cannot stream; use quant=fp8 or none, or drop "
            f"the budget"
        )
    return out


def streamable_bytes(engine: EngineJson) -> int:
    return max(path.stat().st_size for path in engine.engine_dir.glob("rank*.engine"))


def deploy_problems(engine: EngineJson, deploy: DeploySpec, budget_gb: float | None) -> list[str]:
    out, host_gb = [], deploy.host_kv_cache_gb
    if host_gb < 0:
        out.append(f"deploy.host_kv_cache_gb={host_gb:g}: must be >= 0 (0: no host tier)")
    if host_gb > 0 and not kv_cache_reuse(deploy):
        out.append(
            f"deploy.host_kv_cache_gb={host_gb:g}: the host tier holds reusable blocks evicted "
            f"from the GPU, and KV block reuse is off; set deploy.enable_prefix_caching=true "
            f"or host_kv_cache_gb=0"
        )
    if budget_gb is not None and not engine.build.get("weight_streaming"):
        out.append(
            f"build.gpu_weight_budget_gb={budget_gb:g}: engine {engine.engine_dir} was built "
            f"without --weight_streaming, so all its weights stay on the GPU; rebuild it with "
            f"the budget set (force=true)"
        )
    return out


def memory_params(engine: EngineJson, deploy: DeploySpec, budget_gb: float | None) -> dict:
    """The tensorrt_llm parameters (string values) beyond reuse, which the caller writes."""
    params = {}
    if deploy.host_kv_cache_gb > 0:
        params["kv_cache_host_memory_bytes"] = str(int(deploy.host_kv_cache_gb * GB))
    if budget_gb is not None:
        percent = min(1.0, budget_gb * GB / streamable_bytes(engine))
        params["gpu_weights_percent"] = f"{percent:.4f}"
    return params
