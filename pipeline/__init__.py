"""LLM build-and-deploy pipeline: HF checkpoint -> TensorRT-LLM checkpoint -> engine -> Triton."""

__version__ = "0.1.0"
