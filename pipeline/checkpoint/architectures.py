"""Supported HF architectures and how each maps onto the TensorRT-LLM checkpoint."""

from dataclasses import dataclass

from pipeline.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Architecture:
    hf_name: str
    trtllm_name: str  # a key of tensorrt_llm.models.MODEL_MAP
    modelopt_decoder: str  # decoder_type for modelopt's export
    extra_config: tuple[tuple[str, object], ...] = ()


ARCHITECTURES = {
    a.hf_name: a
    for a in (
        Architecture("LlamaForCausalLM", "LlamaForCausalLM", "llama"),
        Architecture("MistralForCausalLM", "MistralForCausalLM", "llama"),
        Architecture("Qwen2ForCausalLM", "Qwen2ForCausalLM", "qwen", (("qwen_type", "qwen2"),)),
    )
}


def architecture_of(hf_config: dict, where: str) -> Architecture:
    names = hf_config.get("architectures") or []
    for name in names:
        if name in ARCHITECTURES:
            return ARCHITECTURES[name]
    raise ConfigError(
        f"{where}: architecture {names or '(none)'} is not supported; supported: "
        f"{', '.join(ARCHITECTURES)} (config.json field 'architectures')"
    )
