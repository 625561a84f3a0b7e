"""Draft-target speculative decoding with backend=trtllm (deploy.trtllm.spec.method=draft_model):
what the build needs of the target engine, and what deploy checks of both engines before it
writes `tensorrt_llm_draft` beside `tensorrt_llm` and names it to tensorrt_llm_bls.

Upstream (docs/trtllm_reference.md, section 10): the target is built with
`--speculative_decoding_mode draft_tokens_external --max_draft_len K` and, like the draft,
`--use_paged_context_fmha enable` (KV cache reuse: each round re-sends the sequence so far); the
BLS names the draft model in its `tensorrt_llm_draft_model_name` parameter and a request asks for
drafts with `num_draft_tokens`.
"""

from pipeline.engine_json import EngineJson
from pipeline.specs.deploy import DeploySpec, TrtllmSpecOptions
from pipeline.trtllm.facts import BuildFacts

DRAFT_MODEL_NAME = "tensorrt_llm_draft"
METHODS = ("none", "draft_model")
# build_config.speculative_decoding_mode of an engine: TRT-LLM's SpeculativeDecodingMode IntFlag
# (tensorrt_llm/models/modeling_utils.py: NONE = auto() = 1, DRAFT_TOKENS_EXTERNAL = auto() = 2)
DRAFT_TOKENS_EXTERNAL = 2
# both models size their KV cache from the GPU memory free when each loads, in either order
MAX_KV_FRACTION = 0.5


def build_problems(f: BuildFacts) -> list[str]:
    """Preflight: a draft_model deployment needs a target engine built for external drafts."""
    spec, o = f.spec, f.build.trtllm
    if spec.method not in METHODS:
        return [
            f"deploy.trtllm.spec.method={spec.method!r}: backend=trtllm serves "
            f"{' or '.join(METHODS)} (a draft engine driven by tensorrt_llm_bls); use one of "
            f"them, or backend=torch for prompt_lookup"
        ]
    if spec.method == "none":
        return []
    out = []
    if o.speculative_decoding_mode != "draft_tokens_external":
        out.append(
            f"deploy.trtllm.spec.method=draft_model: the target must be built with "
            f"build.trtllm.speculative_decoding_mode=draft_tokens_external (it is "
            f"{o.speculative_decoding_mode}); set it and build.trtllm.max_draft_len"
        )
    if not 1 <= spec.num_draft_tokens <= o.max_draft_len:
        out.append(
            f"deploy.trtllm.spec.num_draft_tokens={spec.num_draft_tokens}: must be in [1, "
            f"build.trtllm.max_draft_len={o.max_draft_len}]; raise max_draft_len or lower it"
        )
    if o.use_paged_context_fmha != "enable" or not f.enable_kv_cache_reuse:
        out.append(
            "deploy.trtllm.spec.method=draft_model: each round re-sends the sequence so far, "
            "which needs KV cache reuse; set build.trtllm.use_paged_context_fmha=enable and "
            "deploy.enable_prefix_caching=true"
        )
    if f.tp_size * f.pp_size > 1:
        out.append(
            f"parallel.tp_size={f.tp_size}, pp_size={f.pp_size}: the draft-target deployment "
            f"runs on one rank (the server's other ranks load tensorrt_llm alone); use 1 and 1"
        )
    if f.build.max_beam_width > 1:
        out.append(
            f"build.max_beam_width={f.build.max_beam_width}: draft-target speculative "
            f"decoding runs beam width 1; set it to 1"
        )
    return out


def target_problems(engine: EngineJson, spec: TrtllmSpecOptions) -> list[str]:
    """Deploy: the target engine verifies spec.num_draft_tokens external drafts."""
    if spec.method != "draft_model":
        return []
    build, where = engine.build, f"engine {engine.engine_dir}"
    mode, max_draft_len = build.get("speculative_decoding_mode"), int(build.get("max_draft_len", 0))
    out = []
    if mode != DRAFT_TOKENS_EXTERNAL:
        out.append(
            f"deploy.trtllm.spec.method=draft_model: {where} has speculative_decoding_mode="
            f"{mode}, not draft_tokens_external ({DRAFT_TOKENS_EXTERNAL}); rebuild it with "
            f"build.trtllm.speculative_decoding_mode=draft_tokens_external"
        )
    if spec.num_draft_tokens > max_draft_len:
        out.append(
            f"deploy.trtllm.spec.num_draft_tokens={spec.num_draft_tokens}: {where} verifies "
            f"at most {max_draft_len} (max_draft_len); lower it or rebuild"
        )
    return out


def draft_problems(target: EngineJson, draft: EngineJson | None, deploy: DeploySpec) -> list[str]:
    """Deploy: the draft engine can draft for the target."""
    spec = deploy.trtllm.spec
    if draft is None:
        return [
            f"deploy.trtllm.spec.draft_engine_dir={spec.draft_engine_dir!r}: not a trtllm "
            f"engine dir; build the draft with `python -m pipeline build backend=trtllm` and "
            f"give its absolute path"
        ]
    where, out = f"draft engine {draft.engine_dir}", []
    if draft.pretrained.get("vocab_size") != target.pretrained.get("vocab_size"):
        out.append(
            f"{where}: vocab_size {draft.pretrained.get('vocab_size')} != the target's "
            f"{target.pretrained.get('vocab_size')} (a draft model needs the target's tokenizer)"
        )
    if draft.world_size != 1 or target.world_size != 1:
        out.append(
            f"{where}: world size {draft.world_size}, the target's {target.world_size}: the "
            f"draft-target deployment runs both engines on one rank (the server's other ranks "
            f"load tensorrt_llm alone); build both with parallel.tp_size=1 parallel.pp_size=1"
        )
    for key in ("max_seq_len", "max_batch_size"):
        if int(draft.build[key]) < int(target.build[key]):
            out.append(
                f"{where}: {key} {draft.build[key]} < the target's {target.build[key]}; "
                f"rebuild the draft with build.{key}={target.build[key]}"
            )
    if deploy.trtllm.kv_cache_free_gpu_mem_fraction > MAX_KV_FRACTION:
        out.append(
            f"deploy.trtllm.kv_cache_free_gpu_mem_fraction="
            f"{deploy.trtllm.kv_cache_free_gpu_mem_fraction}: the target and the draft each "
            f"take it of the memory free when they load, in either order; set it <= "
            f"{MAX_KV_FRACTION} (upstream's draft-target example uses 0.5)"
        )
    return out
