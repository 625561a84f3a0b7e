"""Quantized linear formats of modelopt's TensorRT-LLM checkpoints and their runtime modules.

primitives: pure tensor functions (pack/unpack int4, quantize/dequantize) with no module state.
matmul_ops: PyTorch's built-in low-precision matmuls, probed once per device with a fallback.
int8_linear / int4_linear / fp8_linear: one runtime nn.Module per kernel family.
formats: checkpoint tensors of one quant_algo -> the runtime module (fused along out dim).
synthetic: float weights -> modelopt-layout tensors, and their float32 reference (tests, bench).
"""
