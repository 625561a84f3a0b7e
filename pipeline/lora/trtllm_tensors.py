"""An adapter as the tensorrtllm backend takes it in a request: `lora_weights` and `lora_config`,
written at deploy beside the adapter as model.lora_weights.npy and model.lora_config.npy (the
names upstream's inflight_batcher_llm client reads from its --lora-path).

Upstream's layout (TensorRT-LLM examples/hf_lora_convert.py, convert_hf_model; 1.2): one row per
(layer, module) holding A [r, in] then B [out, r] with the adapter's scale folded into B, each
flattened row-major, rows zero-padded to the longest; a config row [module id, layer, r] per
weights row (ids: LoraManager.LORA_MODULE_IDS, tensorrt_llm/lora_manager.py); both with a
leading batch dimension of 1, weights in the engine's dtype, config int32. The weights are the
whole adapter's: TensorRT-LLM's LoRA cache splits them over tensor-parallel ranks itself.
"""

from pathlib import Path

import numpy as np
import torch

from pipeline.engine.engine_config import ModelConfig
from pipeline.engine.lora.weights import LINEAR_PARTS, load_adapter
from pipeline.engine.parallel.mapping import SINGLE_RANK
from pipeline.lora.adapters import TENSORRT_LLM_MODULES, AdapterInfo

# TensorRT-LLM's LoRA module -> its id (LoraManager.LORA_MODULE_IDS), for the modules adapted here
LORA_MODULE_IDS = {
    "attn_q": 1,
    "attn_k": 2,
    "attn_v": 3,
    "attn_dense": 4,
    "mlp_h_to_4h": 5,
    "mlp_4h_to_h": 6,
    "mlp_gate": 7,
}
WEIGHTS_FILE = "model.lora_weights.npy"
CONFIG_FILE = "model.lora_config.npy"


def lora_tensors(
    info: AdapterInfo, cfg: ModelConfig, targets: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """(lora_weights [1, rows, width] float16, lora_config [1, rows, 3] int32) of an adapter,
    checked against the base model as the torch engine checks it."""
    weights = load_adapter(info, cfg, SINGLE_RANK, torch.float32, targets)
    rows, config = [], []
    for layer, linears in enumerate(weights.layers):
        for linear, parts in linears.items():
            for part, a, b in parts:
                module = TENSORRT_LLM_MODULES[LINEAR_PARTS[linear][part]]
                rows.append(torch.cat([a.reshape(-1), b.reshape(-1)]))
                config.append([LORA_MODULE_IDS[module], layer, a.shape[0]])
    width = max(row.numel() for row in rows)
    table = torch.zeros(1, len(rows), width)
    for i, row in enumerate(rows):
        table[0, i, : row.numel()] = row
    return table.to(torch.float16).numpy(), np.array([config], dtype=np.int32)


def write_lora_tensors(
    info: AdapterInfo, cfg: ModelConfig, targets: tuple[str, ...], out_dir: Path
) -> None:
    weights, config = lora_tensors(info, cfg, targets)
    np.save(out_dir / WEIGHTS_FILE, weights)
    np.save(out_dir / CONFIG_FILE, config)
