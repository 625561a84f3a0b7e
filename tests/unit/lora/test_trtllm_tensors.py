"""An adapter as the tensorrtllm backend's lora_weights / lora_config, against upstream's module
ids and layout: each row unpacks to the adapter's own A and scaled B."""

import numpy as np
import torch

from pipeline.lora.adapters import TARGET_MODULES, TENSORRT_LLM_MODULES, read_adapter
from pipeline.lora.trtllm_tensors import (
    CONFIG_FILE,
    LORA_MODULE_IDS,
    WEIGHTS_FILE,
    lora_tensors,
    write_lora_tensors,
)
from tests.unit.engine.test_lora_weights import CFG, KEY, write_adapter


def test_module_ids_are_upstreams():
    # TensorRT-LLM tensorrt_llm/lora_manager.py@007e181, class LoraManager:
    #     LORA_MODULE_IDS = {"attn_qkv": 0, "attn_q": 1, "attn_k": 2, "attn_v": 3,
    #         "attn_dense": 4, "mlp_h_to_4h": 5, "mlp_4h_to_h": 6, "mlp_gate": 7, ...}
    # and the tensorrt_llm model's config.pbtxt@0c8de69 (lora_config's comment) lists the same
    assert LORA_MODULE_IDS == {
        "attn_q": 1,
        "attn_k": 2,
        "attn_v": 3,
        "attn_dense": 4,
        "mlp_h_to_4h": 5,
        "mlp_4h_to_h": 6,
        "mlp_gate": 7,
    }
    assert set(TENSORRT_LLM_MODULES.values()) == set(LORA_MODULE_IDS)


def test_rows_are_upstreams_layout(tmp_path):
    # TensorRT-LLM examples/hf_lora_convert.py@05316d3, convert_hf_model: per (layer, module)
    # in_weights [adapter_size, hidden] then out_weights [hidden, adapter_size] * scale, each
    # .flatten(), concatenated, rows padded to the longest, weights.unsqueeze(0); config rows
    # [module_id, layer_idx, adapter_size] int32, unsqueeze(0). config.pbtxt@0c8de69: lora_weights
    # "[ num_lora_modules_layers, D x Hi + Ho x D ]", TYPE_FP16; lora_config dims [ -1, 3 ]
    tensors = write_adapter(tmp_path / "a", rank=4, alpha=8)  # scale 2
    info = read_adapter(tmp_path / "a", "a", 64)
    weights, config = lora_tensors(info, CFG, TARGET_MODULES)
    assert weights.dtype == np.float16 and config.dtype == np.int32
    assert weights.shape[:2] == config.shape[:2] == (1, len(TARGET_MODULES))
    assert config.shape[2] == 3
    module_of = {LORA_MODULE_IDS[t]: hf for hf, t in TENSORRT_LLM_MODULES.items()}
    seen = set()
    for row, (module_id, layer, rank) in zip(weights[0], config[0].tolist(), strict=True):
        module = module_of[module_id]
        kind = "mlp" if module in ("gate_proj", "up_proj", "down_proj") else "self_attn"
        a_ref = tensors[KEY.format(kind, module, "A")]
        b_ref = tensors[KEY.format(kind, module, "B")]
        out, inp, r = b_ref.shape[0], a_ref.shape[1], rank
        assert (layer, r) == (0, 4)
        row = torch.from_numpy(row.astype(np.float32))
        a, b = row[: r * inp].view(r, inp), row[r * inp : r * inp + out * r].view(out, r)
        torch.testing.assert_close(a, a_ref, rtol=2**-10, atol=2**-10)
        torch.testing.assert_close(b, 2 * b_ref, rtol=2**-10, atol=2**-10)
        assert not row[r * (inp + out) :].any()  # the padding of a shorter row
        seen.add(module)
    assert seen == set(TARGET_MODULES)
    write_lora_tensors(info, CFG, TARGET_MODULES, tmp_path)
    assert np.array_equal(np.load(tmp_path / WEIGHTS_FILE), weights)
    assert np.array_equal(np.load(tmp_path / CONFIG_FILE), config)


def test_deploy_writes_the_tensors_beside_each_copied_adapter(tmp_path):
    import json

    from safetensors.torch import save_file

    from pipeline.lora.deployed import copy_adapters, write_trtllm_tensors
    from pipeline.specs.lora import LoraSpec
    from tests.unit.trtllm.test_trtllm_triton_config import FIXTURE_ENGINE

    # a rank-2 q_proj adapter of the fixture engine's layer 3 (hidden 576)
    adapter = tmp_path / "src" / "sql"
    adapter.mkdir(parents=True)
    key = "base_model.model.model.layers.3.self_attn.q_proj.lora_{}.weight"
    save_file(
        {key.format("A"): torch.ones(2, 576), key.format("B"): torch.ones(576, 2)},
        adapter / "adapter_model.safetensors",
    )
    config = {"r": 2, "lora_alpha": 2, "target_modules": ["q_proj"]}
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    llm_dir = tmp_path / "repo" / "tensorrt_llm"
    copy_adapters({"sql": adapter}, llm_dir)
    write_trtllm_tensors({"sql": adapter}, FIXTURE_ENGINE, LoraSpec(max_rank=16), llm_dir)
    out = llm_dir / "lora" / "sql"
    assert np.load(out / CONFIG_FILE).tolist() == [[[LORA_MODULE_IDS["attn_q"], 3, 2]]]
    assert np.load(out / WEIGHTS_FILE).shape == (1, 1, 2 * 576 * 2)
