from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QuantSpec:
    """Post-training quantization (conf/quant/<recipe>.yaml; the table: pipeline.quant.recipes).

    Calibration and held-out evaluation windows both come from `calib_dataset`: the evaluation
    windows are the last `eval_size` windows of the tokenized text, calibration samples only from
    the text before them, so the two never overlap.
    """

    name: str = "none"  # recipe: none, fp8, int8_sq, int4_awq, w4a8_awq, int8_wo, int4_wo, nvfp4
    kv_cache: str = "none"  # none | fp8 | int8
    block_size: int | None = None  # weights per scale along in_features (int4_awq/w4a8_awq/int4_wo)
    smoothquant_alpha: float | None = None  # int8_sq migration strength in [0, 1]
    # dtype of the unquantized tensors (norms, embedding, lm_head, scales) in the export
    export_dtype: str = "float16"
    # lee_background (gensim's news corpus), a local .txt / .jsonl ("text" field) file, or
    # hf:<dataset id>[:<config>] (needs the `datasets` package and a reachable hub)
    calib_dataset: str = "lee_background"
    calib_size: int = 64  # calibration windows
    seq_len: int = 512  # tokens per calibration / evaluation window
    batch_size: int = 4  # windows per forward pass (calibration and evaluation)
    seed: int = 1234  # which windows are sampled for calibration
    eval_size: int = 16  # held-out windows for the perplexity gate
    max_ppl_increase_pct: float | None = None  # gate: fail when ppl rises more than this (%)
    gate_runtime: str = "fake_quant"  # fake_quant (modelopt, in memory) | engine (torch engine)
    export_hf: bool = False  # also write modelopt's unified HF checkpoint under hf/
