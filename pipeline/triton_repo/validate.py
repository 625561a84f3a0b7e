"""Whole-repository checks before a repository is published (the reference's checklist, section 7).

Every problem is collected; check_repository raises one ConfigError listing them all.
"""

import re
from pathlib import Path

from google.protobuf import text_format

from pipeline.errors import ConfigError
from pipeline.triton_repo import model_config as mcfg
from pipeline.triton_repo.interface import MODEL_NAMES
from pipeline.triton_repo.validate_ensemble import (
    check_bls_interface,
    check_ensemble,
    check_text_source,
)

GPT_MODEL_TYPES = ("inflight_fused_batching", "inflight_batching", "V1")
SCHEDULER_POLICIES = ("max_utilization", "guaranteed_no_evict")
BOOLS = ("true", "false", "1", "0", "True", "False", "TRUE", "FALSE")
TRTLLM_BOOL_PARAMS = (
    "exclude_input_in_output",
    "enable_kv_cache_reuse",
    "enable_chunked_context",
    "normalize_log_probs",
    "decoupled_mode",
    "kv_cache_onboard_blocks",
)


def read_configs(repo_dir: Path, errors: list[str]) -> dict[str, mcfg.ModelConfig]:
    """Parse every model's config.pbtxt; structure and placeholder problems go to errors."""
    configs = {}
    for name in MODEL_NAMES:
        model_dir = Path(repo_dir) / name
        path = model_dir / "config.pbtxt"
        if not path.is_file():
            errors.append(
                f"{name}: missing {path}; the repository needs all of {', '.join(MODEL_NAMES)}"
            )
            continue
        if not (model_dir / "1").is_dir():
            errors.append(f"{name}: no version dir {model_dir / '1'}; Triton skips the model")
        text = path.read_text()
        for match in re.finditer(r"\$\{[^}]*\}?", text):
            line = text.count("\n", 0, match.start()) + 1
            errors.append(
                f"{name}/config.pbtxt:{line}: unfilled placeholder {match.group()!r}; "
                f"write an explicit value or drop the field"
            )
        try:
            configs[name] = mcfg.parse(text)
        except text_format.ParseError as exc:
            errors.append(f"{name}/config.pbtxt: does not parse as inference.ModelConfig ({exc})")
    return configs


def check_model(name: str, cfg, model_dir: Path) -> list[str]:
    errors = []
    if cfg.name and cfg.name != name:
        errors.append(f"{name}/config.pbtxt: name {cfg.name!r} differs from its directory {name!r}")
    for kind, tensors in (("input", cfg.input), ("output", cfg.output)):
        names = [t.name for t in tensors]
        errors += [
            f"{name}: {kind} {n!r} declared {names.count(n)} times"
            for n in sorted(set(names))
            if names.count(n) > 1
        ]
    if cfg.backend == "python" and not (model_dir / "1" / "model.py").is_file():
        errors.append(f"{name}: python backend but no {model_dir / '1' / 'model.py'}")
    if cfg.platform == "ensemble" and len(cfg.instance_group):
        errors.append(f"{name}: an ensemble cannot declare instance_group")
    for group in cfg.instance_group:
        if group.count < 1:
            errors.append(
                f"{name}: instance_group count {group.count} < 1; set "
                f"deploy.{name.removeprefix('tensorrt_llm_')}_instance_count >= 1"
            )
    preferred = [s for s in cfg.dynamic_batching.preferred_batch_size if s > cfg.max_batch_size]
    if preferred:
        errors.append(
            f"{name}: preferred_batch_size {preferred} > max_batch_size "
            f"{cfg.max_batch_size}; fix deploy.preferred_batch_sizes"
        )
    return errors + check_parameters(name, cfg)


def check_parameters(name: str, cfg) -> list[str]:
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    errors = []
    for key in ("tokenizer_dir", "engine_dir", "gpt_model_path"):
        if key in params and not Path(params[key]).is_absolute():
            errors.append(
                f"{name}: parameter {key}={params[key]!r} must be an absolute path "
                f"(Triton and the container resolve it, not the pipeline's cwd)"
            )
        elif key in params and not Path(params[key]).is_dir():
            errors.append(f"{name}: parameter {key}={params[key]!r} is not a directory")
    policy = params.get("batch_scheduler_policy")
    if policy is not None and policy not in SCHEDULER_POLICIES:
        errors.append(
            f"{name}: batch_scheduler_policy={policy!r} is not one of "
            f"{SCHEDULER_POLICIES}; fix deploy.batch_scheduler_policy"
        )
    steps = params.get("num_scheduler_steps")  # the torch model's engine
    if steps is not None and not steps.isdigit():
        errors.append(
            f"{name}: num_scheduler_steps={steps} must be >= 0 (0 = auto); fix "
            f"deploy.torch.num_scheduler_steps"
        )
    if cfg.backend != "tensorrtllm":
        return errors
    if params.get("gpt_model_type") not in GPT_MODEL_TYPES:
        errors.append(
            f"{name}: gpt_model_type={params.get('gpt_model_type')!r} is not one of "
            f"{GPT_MODEL_TYPES}; fix deploy.trtllm.batching_strategy"
        )
    errors += [
        f"{name}: parameter {key}={params[key]!r} is not a bool (true/false/1/0)"
        for key in TRTLLM_BOOL_PARAMS
        if key in params and params[key] not in BOOLS
    ]
    fraction = params.get("kv_cache_free_gpu_mem_fraction")
    if fraction is not None and not _in_unit_interval(fraction):
        errors.append(
            f"{name}: kv_cache_free_gpu_mem_fraction={fraction!r} must be in (0, 1]; "
            f"fix deploy.trtllm.kv_cache_free_gpu_mem_fraction"
        )
    return errors


def _in_unit_interval(text: str) -> bool:
    try:
        return 0.0 < float(text) <= 1.0
    except ValueError:
        return False


def check_batching(configs: dict, engine_max_batch_size: int) -> list[str]:
    errors = [
        f"{name}: max_batch_size {cfg.max_batch_size} < 1; every model batches (dims "
        f"exclude the batch dim)"
        for name, cfg in configs.items()
        if cfg.max_batch_size < 1
    ]
    above = {
        name: cfg.max_batch_size
        for name, cfg in configs.items()
        if cfg.max_batch_size > engine_max_batch_size
    }
    if above:
        errors.append(
            f"{', '.join(f'{n}: max_batch_size {b}' for n, b in above.items())} > the "
            f"engine's {engine_max_batch_size}; set deploy.triton_max_batch_size <= "
            f"{engine_max_batch_size} (0 = the engine's) or rebuild with a larger "
            f"build.max_batch_size"
        )
    return errors


def check_decoupled(configs: dict) -> list[str]:
    decoupled = {n: c.model_transaction_policy.decoupled for n, c in configs.items()}
    errors = [
        f"{n}: must not be decoupled (the ensemble feeds it one response per request)"
        for n in ("preprocessing", "postprocessing")
        if decoupled.get(n)
    ]
    if (
        "tensorrt_llm" in decoupled
        and "tensorrt_llm_bls" in decoupled
        and decoupled["tensorrt_llm"] != decoupled["tensorrt_llm_bls"]
    ):
        errors.append(
            f"tensorrt_llm is decoupled={decoupled['tensorrt_llm']} but tensorrt_llm_bls "
            f"is decoupled={decoupled['tensorrt_llm_bls']}; both follow "
            f"deploy.decoupled_mode"
        )
    return errors


def check_repository(repo_dir: Path, engine_max_batch_size: int, backend: str) -> None:
    """Raise one ConfigError naming every problem in the repository at repo_dir."""
    errors: list[str] = []
    configs = read_configs(repo_dir, errors)
    for name, cfg in configs.items():
        errors += check_model(name, cfg, Path(repo_dir) / name)
    errors += check_batching(configs, engine_max_batch_size)
    errors += check_decoupled(configs)
    errors += check_ensemble(configs)
    errors += check_text_source(configs, backend)
    errors += check_bls_interface(configs)
    if errors:
        raise ConfigError(
            f"deploy: the generated repository is invalid ({len(errors)} "
            f"problem{'s' * (len(errors) > 1)}; nothing was published): " + "; ".join(errors)
        )
