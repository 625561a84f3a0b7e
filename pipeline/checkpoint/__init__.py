"""The TensorRT-LLM checkpoint (config.json + rank<N>.safetensors) both backends build from."""
