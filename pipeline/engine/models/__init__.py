"""Model classes by TensorRT-LLM architecture name."""

from pipeline.engine.engine_config import ARCHITECTURES
from pipeline.engine.models.llama import LlamaForCausalLM

# Mistral and Qwen2 are Llama with other defaults (Qwen2's qkv bias is in the checkpoint)
MODELS = dict.fromkeys(ARCHITECTURES, LlamaForCausalLM)
