from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QuantSpec:
    """Post-training quantization (conf/quant/<recipe>.yaml; the table: pipeline.quant.recipes).

    Every recipe starts from these defaults, so any quant.* override composes with any recipe
    (e.g. `quant.calib_size=128 quant.seq_len=256`); `none` uses none of them.

    Calibration and held-out evaluation windows both come from `calib_dataset`: the evaluation
    windows are the last `eval_size` windows of the tokenized text, calibration samples only from
    the text before them, so the two never overlap.
    """

    name: str = "none"  # recipe: none, fp8, int8_sq, int4_awq, w4a8_awq, int8_wo, int4_wo, nvfp4
    kv_cache: str = "none"  # none | fp8 | int8 (KV-cache quantization, its own key)
    block_size: int | None = None  # weights per scale along in_features (int4_awq/w4a8_awq/int4_wo)
    smoothquant_alpha: float | None = None  # int8_sq migration strength in [0, 1]
    # dtype of the unquantized tensors (norms, embedding, lm_head, scales) in the export. float16
    # is what TensorRT-LLM's quantize.py picks for fp32 sources (--dtype auto); it runs on every
    # GPU generation (bf16 needs SM >= 80) and keeps 3 more mantissa bits than bfloat16. The
    # model is loaded in this dtype BEFORE calibration (modelopt's export does not cast an fp32
    # model consistently), so calibration, evaluation and export all see the same numbers. Use
    # bfloat16 for models whose activations overflow fp16.
    export_dtype: str = "float16"
    # lee_background (gensim's news corpus), a local .txt / .jsonl ("text" field) file, or
    # hf:<dataset id>[:<config>] (needs the `datasets` package and a reachable hub)
    calib_dataset: str = "lee_background"
    calib_size: int = 64  # calibration windows (TensorRT-LLM's quantize.py: 512, AWQ 32)
    seq_len: int = 512  # tokens per calibration / evaluation window
    batch_size: int = 4  # windows per forward pass (calibration and evaluation)
    seed: int = 1234  # which windows are sampled for calibration
    eval_size: int = 16  # held-out windows for the perplexity gate (the end of the text)
    max_ppl_increase_pct: float | None = None  # gate: e.g. 5.0 fails when ppl rises by over 5 %
    # what computes the quantized ppl: fake_quant (modelopt's fake-quant HF model, after the
    # export merged its scales) or engine (our torch engine running the exported checkpoint, i.e.
    # what deploys; it has no NVFP4 or quantized-KV kernels and runs tp=1 pp=1 only)
    gate_runtime: str = "fake_quant"
    export_hf: bool = False  # also write modelopt's unified HF checkpoint under hf/
