"""Post-training quantization with NVIDIA modelopt, for the quantize stage.

recipes (the one recipe -> modelopt config -> quant_algo table, SM rules), calibration (text ->
calibration / held-out windows), shapes (pre-checks), ptq (load + calibrate), nvfp4_cpu (FP4
fake quant on CPU), export (TensorRT-LLM checkpoint), perplexity, gate (report + verdict).

What an engine finds in a quantized checkpoint (config.json `quantization.quant_algo`; names are
convert's, plus these suffixes on each quantized linear `transformer.layers.N.{attention.qkv,
attention.dense, mlp.fc, mlp.gate, mlp.proj}`; everything else is `dtype`):
- FP8: weight F8_E4M3 [out, in]; weights_scaling_factor F32 [1]; activation_scaling_factor F32
  [1]. w = weight * weights_scaling_factor.
- W8A8_SQ_PER_CHANNEL: weight I8 [out, in]; weights_scaling_factor F32 [out];
  activation_scaling_factor F32 [1]; prequant_scaling_factor dtype [in]: y = (x * pqs) @ w.T
  with w = weight * weights_scaling_factor[:, None] (w * pqs[None, :] is the original weight).
- W8A16: weight I8 [out, in]; weights_scaling_factor F32 [out]. (backend=trtllm's int8_wo and
  int4_wo instead keep float weights labelled W8A16 / W4A16, which trtllm-build quantizes: see
  recipes.py and docs/trtllm_reference.md, section 3.6.)
- W4A16_AWQ: weight I8 [out/2, in], two signed int4 per byte from rows 2i (low nibble) and 2i+1
  (high nibble); weights_scaling_factor F32 [out, in/group_size]: w = int4 * scale of its group;
  prequant_scaling_factor dtype [in] when `pre_quant_scale` is true (int4_awq; int4_wo has none),
  applied to x as for SmoothQuant.
- W4A8_AWQ: as W4A16_AWQ (same w formula) plus weights_scaling_factor_2 F32 [1] (the fp8
  per-tensor scale the kernel folds into the group scales) and activation_scaling_factor F32 [1]
  (FP8 activations).
- NVFP4: weight U8 [out, in/2], two e2m1 per byte (low nibble = even column);
  weights_scaling_factor F8_E4M3 [out, in/16]; weights_scaling_factor_2 F32 []: w = e2m1 value *
  block scale * weights_scaling_factor_2; activation_scaling_factor F32 [].
- KV cache (kv_cache_quant_algo FP8 / INT8): attention.{k,v,kv}_cache_scaling_factor F32 [1].
tests/integration/test_quantize.py decodes each format with these formulas back to the original
weights; pipeline/quant/export.py lists where we change modelopt's config.json.
"""
