"""Run tritonserver on a deployed repository: locally from the nvidia-pytriton wheel (torch
backend, CPU or GPU), or as the TensorRT-LLM container command (trtllm backend)."""
