"""Small LoRA adapters for SmolLM2 made by peft in the test, and their reference tokens: HF
transformers + peft with the adapter merged (merge_and_unload), greedy."""

from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

from tests.conftest import greedy_tokens_of

ALL_LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# name -> (rank, alpha, seed); ranks differ so the device slots pad them
ADAPTERS = {"alpha": (8, 16, 1), "beta": (4, 4, 2), "gamma": (16, 8, 3)}


def make_adapter(
    hf_dir: Path,
    out_dir: Path,
    rank: int,
    alpha: int,
    seed: int,
    target_modules: list[str] = ALL_LINEARS,
) -> Path:
    """A LoRA on target_modules with random non-zero A and B (each changes the output), saved
    by peft as adapter_config.json + adapter_model.safetensors."""
    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    config = LoraConfig(
        r=rank, lora_alpha=alpha, target_modules=target_modules, init_lora_weights=False
    )
    model = get_peft_model(base, config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:  # small enough to keep the text readable, large enough to count
                param.mul_(0.5)
    model.save_pretrained(out_dir)
    return out_dir


def make_adapters(hf_dir: Path, root: Path) -> Path:
    """ADAPTERS under root/<name>; returns root (an adapter dir)."""
    for name, (rank, alpha, seed) in ADAPTERS.items():
        make_adapter(hf_dir, root / name, rank, alpha, seed)
    return root


def merged_greedy(
    hf_dir: Path,
    adapter: Path | None,
    prompts: list[list[int]],
    max_new_tokens: int,
    eos_ids: tuple[int, ...],
) -> list[list[int]]:
    """Greedy tokens of the base with `adapter` merged (None: the base alone), cut before eos."""
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return greedy_tokens_of(model.eval(), prompts, eos_ids, max_new_tokens)
