"""LoRA adapters as files: PEFT's adapter_config.json + adapter_model.safetensors (never
pickles), read and checked without torch, so the serving side can list them.

An adapters dir holds one sub-directory per adapter, named for the adapter. Target modules use
Hugging Face's Llama names; TENSORRT_LLM_MODULES gives TensorRT-LLM's names for them
(TensorRT-LLM 1.2 tensorrt_llm/lora_helper.py, get_default_trtllm_modules_to_hf_modules).
"""

import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ArtifactError, ConfigError

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PICKLE_FILES = ("adapter_model.bin", "adapter_model.pt")

# HF module -> TensorRT-LLM's LoRA module name
TENSORRT_LLM_MODULES = {
    "q_proj": "attn_q",
    "k_proj": "attn_k",
    "v_proj": "attn_v",
    "o_proj": "attn_dense",
    "gate_proj": "mlp_h_to_4h",
    "up_proj": "mlp_gate",
    "down_proj": "mlp_4h_to_h",
}
TARGET_MODULES = tuple(TENSORRT_LLM_MODULES)
# peft's key of one LoRA matrix of a decoder layer's linear
WEIGHT_KEY = re.compile(
    r"^base_model\.model\.model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$"
)
# adapter names travel in URLs, Triton inputs and directory names
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True, slots=True)
class AdapterInfo:
    """One adapter's config, checked: what the engine needs before it reads the weights."""

    name: str
    path: Path
    rank: int
    scale: float  # lora_alpha / r (or / sqrt(r) with use_rslora), folded into B at load
    base_model: str | None  # base_model_name_or_path, as peft saved it

    @property
    def weights_path(self) -> Path:
        return self.path / WEIGHTS_FILE


def check_name(name: str, where: str) -> None:
    if not NAME.match(name):
        raise ConfigError(
            f"{where}: adapter name {name!r} must be 1-128 letters, digits, '.', '_' or '-' "
            f"(starting with a letter or digit); rename it"
        )


def read_adapter(path: Path, name: str, max_rank: int) -> AdapterInfo:
    """Read and check path/adapter_config.json: a plain LoRA of rank <= max_rank, saved as
    safetensors. Raises ArtifactError / ConfigError naming the adapter and the fix."""
    where = f"lora adapter {name!r} ({path})"
    check_name(name, where)
    config_path = path / CONFIG_FILE
    if not config_path.is_file():
        raise ArtifactError(
            f"{where}: {CONFIG_FILE} missing; an adapter is a directory saved by peft's "
            f"save_pretrained (adapter_config.json + adapter_model.safetensors)"
        )
    if not (path / WEIGHTS_FILE).is_file():
        pickles = [p for p in PICKLE_FILES if (path / p).is_file()]
        hint = (
            f"it has {pickles[0]}, a pickle (pickles can run code when loaded): save it again "
            f"with save_pretrained(safe_serialization=True)"
            if pickles
            else "save it with peft's save_pretrained"
        )
        raise ArtifactError(f"{where}: {WEIGHTS_FILE} missing; {hint}")
    try:
        cfg = json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{where}: {CONFIG_FILE} unreadable ({exc})") from exc
    problems = []
    if cfg.get("peft_type", "LORA") != "LORA":
        problems.append(f"peft_type={cfg.get('peft_type')!r} (only LORA)")
    for key in ("use_dora", "modules_to_save", "rank_pattern", "alpha_pattern"):
        if cfg.get(key):
            problems.append(f"{key}={cfg[key]!r} (not supported: leave it unset)")
    if cfg.get("bias", "none") != "none":
        problems.append(f"bias={cfg['bias']!r} (only 'none')")
    targets = cfg.get("target_modules")
    if isinstance(targets, list):
        unknown = sorted(set(targets) - set(TARGET_MODULES))
        if unknown:
            problems.append(
                f"target_modules {unknown} (the engine adapts {', '.join(TARGET_MODULES)})"
            )
    rank, alpha = cfg.get("r"), cfg.get("lora_alpha")
    if not isinstance(rank, int) or rank < 1:
        problems.append(f"r={rank!r} (a positive integer)")
    elif rank > max_rank:
        problems.append(f"r={rank} exceeds lora.max_rank={max_rank} (raise lora.max_rank)")
    if not isinstance(alpha, int | float):
        problems.append(f"lora_alpha={alpha!r} (a number)")
    if problems:
        raise ConfigError(f"{where}: {'; '.join(problems)}")
    scale = alpha / (rank**0.5 if cfg.get("use_rslora") else rank)
    return AdapterInfo(name, path, rank, float(scale), cfg.get("base_model_name_or_path"))


def adapter_dirs(root: Path | None) -> dict[str, Path]:
    """name -> directory of every adapter under root (a dir with adapter_config.json)."""
    if root is None or not root.is_dir():
        return {}
    return {p.name: p for p in sorted(root.iterdir()) if (p / CONFIG_FILE).is_file()}


def check_target_modules(modules: list[str] | tuple[str, ...], where: str) -> tuple[str, ...]:
    unknown = sorted(set(modules) - set(TARGET_MODULES))
    if unknown or not modules:
        raise ConfigError(
            f"{where}: target modules {list(modules)}: use a non-empty subset of "
            f"{list(TARGET_MODULES)}"
        )
    return tuple(m for m in TARGET_MODULES if m in modules)  # in the engine's order


# where a deployed repository keeps its adapters: under the tensorrt_llm model's directory
REPOSITORY_DIR = "lora"


def repository_adapters(repo_dir: Path) -> Path:
    """The adapter dir of a published repository (deploy.repo_dir)."""
    return Path(repo_dir) / "tensorrt_llm" / REPOSITORY_DIR


def task_id(name: str) -> int:
    """An adapter's lora_task_id (the tensorrtllm backend's input): crc32 of its name, so a
    client knows it from the name alone and it never changes."""
    return zlib.crc32(name.encode())


def name_for_task(root: Path | None, lora_task_id: int) -> str:
    """The adapter under root whose task id this is; ValueError naming the known ones."""
    names = {task_id(name): name for name in adapter_dirs(root)}
    if lora_task_id in names:
        return names[lora_task_id]
    known = ", ".join(f"{i} ({n})" for i, n in sorted(names.items())) or "none"
    raise ValueError(
        f"lora_task_id={lora_task_id} names no adapter of this model (known: {known}); send "
        f"the task id of a deployed adapter (crc32 of its name)"
    )
