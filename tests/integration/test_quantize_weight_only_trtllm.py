"""int8_wo / int4_wo for backend=trtllm: a checkpoint trtllm-build 1.2 can build.

TensorRT-LLM's weight-only layers (WeightOnlyQuantLinear) take an int8 weight in its mixed-GEMM
layout plus `per_channel_scale`, and its checkpoint loader makes both itself: for quant_algo
W8A16 / W4A16 it quantizes each `{qkv,dense,fc,proj,gate}.weight` that is not int8 yet and adds
`<name>.per_channel_scale` (docs/trtllm_reference.md, section 3.4). So the checkpoint must hold
floating-point linear weights under those labels, as upstream's own modelopt flow writes them.
The gate still measures int8 / int4 per-channel weights: what the build will compute.
Runs real modelopt on real SmolLM2 weights cut to 2 layers (tests/integration/conftest.py).
"""

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.integration.conftest import dtypes_and_shapes, two_layer_spec

pytestmark = pytest.mark.slow

# the loader's selection rule (convert_utils.weight_only_quantize_dict): a name containing one of
# these and a dtype other than int8 is quantized at build time
QUANT_WEIGHTS = ("qkv.weight", "dense.weight", "fc.weight", "proj.weight", "gate.weight")
FLOAT_DTYPES = ("F16", "BF16", "F32")


@pytest.mark.parametrize(
    "recipe,quant_algo,kv_cache",
    [("int8_wo", "W8A16", "none"), ("int4_wo", "W4A16", "none"), ("int8_wo", "W8A16", "fp8")],
)
def test_trtllm_weight_only_checkpoint_holds_float_linears(
    recipe, quant_algo, kv_cache, two_layer_hf_dir, convert_dir, tmp_path
):
    from pipeline.stages import quantize

    out = quantize.run(
        two_layer_spec(
            "quantize",
            two_layer_hf_dir,
            tmp_path,
            f"quant={recipe}",
            f"quant.kv_cache={kv_cache}",
            "backend=trtllm",
            "quant.max_ppl_increase_pct=1000",
        )
    )
    quantization = json.loads((out / "config.json").read_text())["quantization"]
    assert quantization["quant_algo"] == quant_algo
    assert quantization["kv_cache_quant_algo"] == ("FP8" if kv_cache == "fp8" else None)
    # None = the loader's default exclusions (lm_head, vocab_embedding, ...); a list would replace
    # them and turn the embedding into a WeightOnlyQuantEmbedding that wants per_token_scale
    assert quantization.get("exclude_modules") is None

    ours, theirs = (
        dtypes_and_shapes(out / "rank0.safetensors"),
        dtypes_and_shapes(convert_dir / "rank0.safetensors"),
    )
    linears = [k for k in ours if any(p in k for p in QUANT_WEIGHTS)]
    assert len(linears) == 2 * 5
    assert all(ours[k][0] in FLOAT_DTYPES and ours[k] == theirs[k] for k in linears)
    extra = {k: v for k, v in ours.items() if k not in theirs}
    if kv_cache == "fp8":
        assert ours["transformer.layers.0.attention.kv_cache_scaling_factor"] == ("F32", [1])
        extra = {k: v for k, v in extra.items() if "cache_scaling_factor" not in k}
    assert extra == {}  # no weights_scaling_factor / per_channel_scale: the build makes them

    # the exported weights are the model's own (fp16), not a dequantized int8 / int4 copy
    qkv = "transformer.layers.0.attention.qkv.weight"
    original = load_file(convert_dir / "rank0.safetensors")[qkv]
    assert torch.equal(load_file(out / "rank0.safetensors")[qkv], original)

    report = json.loads((out / "quant_report.json").read_text())
    assert report["quant_algo"] == quant_algo
    # the gate computed with per-channel int8/int4 weights, not the float export
    assert report["ppl_quantized"] != report["ppl_reference"]


def test_trtllm_and_torch_weight_only_artifacts_do_not_collide(two_layer_hf_dir, tmp_path):
    from pipeline.stages import quantize

    outs = {
        backend: quantize.run(
            two_layer_spec(
                "quantize",
                two_layer_hf_dir,
                tmp_path,
                "quant=int8_wo",
                f"backend={backend}",
                "quant.max_ppl_increase_pct=1000",
            )
        )
        for backend in ("torch", "trtllm")
    }
    assert outs["torch"] != outs["trtllm"]
    torch_qkv = dtypes_and_shapes(outs["torch"] / "rank0.safetensors")
    assert torch_qkv["transformer.layers.0.attention.qkv.weight"] == ("I8", [960, 576])
