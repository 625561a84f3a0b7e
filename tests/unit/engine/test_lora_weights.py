"""An adapter in the engine's layout: the scale folded into B, and tensor-parallel shards whose
deltas add up to the whole adapter's (column-parallel B split, row-parallel A split)."""

import json

import torch
from safetensors.torch import save_file

from pipeline.engine.engine_config import ModelConfig
from pipeline.engine.lora.weights import full_shapes, load_adapter
from pipeline.engine.parallel.mapping import Mapping
from pipeline.lora.adapters import TARGET_MODULES, read_adapter

CFG = ModelConfig("LlamaForCausalLM", "float32", 64, 32, 1, 4, 2, 8, 48, 1e-5, 1e4, None, {})
KEY = "base_model.model.model.layers.0.{}.{}.lora_{}.weight"


def write_adapter(path, rank=4, alpha=8):
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for module, (out, inp) in full_shapes(CFG).items():
        kind = "mlp" if module in ("gate_proj", "up_proj", "down_proj") else "self_attn"
        tensors[KEY.format(kind, module, "A")] = torch.randn(rank, inp, generator=g)
        tensors[KEY.format(kind, module, "B")] = torch.randn(out, rank, generator=g)
    path.mkdir()
    save_file(tensors, path / "adapter_model.safetensors")
    config = {"r": rank, "lora_alpha": alpha, "target_modules": list(TARGET_MODULES)}
    (path / "adapter_config.json").write_text(json.dumps(config))
    return tensors


def test_tp_shards_add_up_to_the_whole_delta(tmp_path):
    tensors = write_adapter(tmp_path / "a")
    info = read_adapter(tmp_path / "a", "a", 64)
    whole = load_adapter(info, CFG, Mapping(), torch.float32, TARGET_MODULES).layers[0]
    shards = [
        load_adapter(info, CFG, Mapping(2, 1, r), torch.float32, TARGET_MODULES).layers[0]
        for r in range(2)
    ]
    # the scale (alpha / r = 2) is in B
    _, a, b = whole["qkv"][0]
    a_ref = tensors[KEY.format("self_attn", "q_proj", "A")]
    b_ref = tensors[KEY.format("self_attn", "q_proj", "B")]
    torch.testing.assert_close(b @ a, 2 * b_ref @ a_ref)
    for linear, parts in whole.items():
        for i, (part, a, b) in enumerate(parts):
            pieces = [s[linear][i] for s in shards]
            assert all(p[0] == part for p in pieces)
            if linear in ("dense", "proj"):  # row-parallel: the ranks' partial sums add up
                cols = torch.cat([p[1] for p in pieces], dim=1)
                torch.testing.assert_close(cols, a)
                torch.testing.assert_close(pieces[0][2], b)
            else:  # column-parallel: the ranks' outputs stack
                torch.testing.assert_close(torch.cat([p[2] for p in pieces]), b)
                torch.testing.assert_close(pieces[0][1], a)
