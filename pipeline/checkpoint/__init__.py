"""The TensorRT-LLM checkpoint (config.json + rank<N>.safetensors): the artifact both backends build from."""
