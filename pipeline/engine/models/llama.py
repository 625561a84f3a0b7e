"""Llama-family decoder (Llama, Mistral, Qwen2) on TensorRT-LLM checkpoint tensor names.

transformer.vocab_embedding, transformer.layers.N.{input_layernorm, attention.qkv (+bias for
Qwen2), attention.dense, post_layernorm, mlp.fc (gate_proj), mlp.gate (up_proj), mlp.proj},
transformer.ln_f, lm_head. Linear layers come from build_linear, which owns quantization.

Tensor parallel: a rank file holds its heads and MLP columns (qkv, fc, gate: column-parallel;
dense, proj: row-parallel, whose partial sums are all-reduced) and a vocabulary slice of the
head; the model reads its local sizes from them. Pipeline parallel: a stage builds its own layers
(numbered from 0 in its file); the first embeds token ids, the others take [T, 2, hidden] (the
previous stage's output and residual, not yet added), and the last ends in ln_f and the head.
"""

from collections.abc import Callable

import torch
from torch import nn

from pipeline.engine.engine_config import ModelConfig
from pipeline.engine.layers.activation import SiluAndMul
from pipeline.engine.layers.attention import Attention
from pipeline.engine.layers.batch_metadata import BatchMetadata
from pipeline.engine.layers.linear import build_linear
from pipeline.engine.layers.rmsnorm import RMSNorm
from pipeline.engine.layers.rotary import RotaryEmbedding
from pipeline.engine.layers.vocab_parallel import (
    VocabParallelEmbedding,
    gather_logits,
    vocab_slice,
)
from pipeline.engine.parallel.mapping import SINGLE_RANK, Mapping
from pipeline.engine.parallel.tensor_parallel import SINGLE, TensorParallel
from pipeline.engine.quant.fp8_linear import fused_input_scale
from pipeline.engine.quant.kv_cache import SCALE_SUFFIX
from pipeline.errors import ArtifactError


def _tensor(
    weights: dict[str, torch.Tensor], name: str, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    if name not in weights:
        raise ArtifactError(
            f"engine weights lack {name!r}; rebuild the engine from a complete "
            f"checkpoint (convert/quantize with force=true)"
        )
    return weights[name].to(device, dtype)


class LlamaAttention(nn.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        weights: dict,
        prefix: str,
        rotary: RotaryEmbedding,
        dtype: torch.dtype,
        device: torch.device,
        mapping: Mapping,
        tp: TensorParallel,
    ):
        super().__init__()
        self.num_heads, self.num_kv_heads = mapping.local_heads(cfg.num_heads, cfg.num_kv_heads)
        self.head_dim, self.tp = cfg.head_dim, tp
        quant = cfg.quantization
        self.qkv = build_linear(weights, [f"{prefix}.qkv"], quant, dtype, device)
        self.dense = build_linear(weights, [f"{prefix}.dense"], quant, dtype, device)
        expected = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        if sum(self.qkv.output_sizes) != expected:
            raise ArtifactError(
                f"engine weights: {prefix}.qkv has {sum(self.qkv.output_sizes)} output rows, "
                f"not the {expected} of {self.num_heads} query + 2 x {self.num_kv_heads} KV "
                f"heads of rank {mapping.rank} (tp_size={mapping.tp_size}); the rank files do "
                f"not match config.json's mapping: convert again (force=true)"
            )
        kv_scale = None
        if quant.get("kv_cache_quant_algo") is not None:  # one host read, at load
            kv_scale = _tensor(weights, f"{prefix}.{SCALE_SUFFIX}", torch.float32, device).item()
        self.attn = Attention(cfg.head_dim, rotary, device, kv_scale)

    def forward(self, x: torch.Tensor, meta: BatchMetadata, kv_cache: torch.Tensor) -> torch.Tensor:
        # x [T, hidden]; kv_cache [2, NB, BS, Hkv, D] -> [T, hidden]
        num_tokens, d = x.shape[0], self.head_dim
        q, k, v = self.qkv(x).split(
            [self.num_heads * d, self.num_kv_heads * d, self.num_kv_heads * d], dim=-1
        )
        q, k, v = (t.view(num_tokens, -1, d) for t in (q, k, v))
        out = self.attn(q, k, v, kv_cache, meta)  # [T, H, D]
        return self.tp.all_reduce(self.dense(out.reshape(num_tokens, -1)))


class LlamaMLP(nn.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        weights: dict,
        prefix: str,
        dtype: torch.dtype,
        device: torch.device,
        tp: TensorParallel,
    ):
        super().__init__()
        self.tp = tp
        quant = cfg.quantization
        # mlp.fc is gate_proj and mlp.gate is up_proj: one GEMM for both
        self.gate_up = build_linear(
            weights, [f"{prefix}.fc", f"{prefix}.gate"], quant, dtype, device
        )
        self.act = SiluAndMul(device)
        self.proj = build_linear(weights, [f"{prefix}.proj"], quant, dtype, device)
        self.act.quantize_output(fused_input_scale(self.proj))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [T, hidden] -> [T, hidden]
        return self.tp.all_reduce(self.proj(self.act(self.gate_up(x))))


class LlamaDecoderLayer(nn.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        weights: dict,
        index: int,
        rotary: RotaryEmbedding,
        dtype: torch.dtype,
        device: torch.device,
        mapping: Mapping,
        tp: TensorParallel,
    ):
        super().__init__()
        prefix = f"transformer.layers.{index}"
        eps = cfg.norm_epsilon
        self.input_layernorm = RMSNorm(
            _tensor(weights, f"{prefix}.input_layernorm.weight", dtype, device), eps
        )
        self.attention = LlamaAttention(
            cfg, weights, f"{prefix}.attention", rotary, dtype, device, mapping, tp
        )
        self.post_layernorm = RMSNorm(
            _tensor(weights, f"{prefix}.post_layernorm.weight", dtype, device), eps
        )
        self.mlp = LlamaMLP(cfg, weights, f"{prefix}.mlp", dtype, device, tp)
        self.input_layernorm.quantize_output(fused_input_scale(self.attention.qkv))
        self.post_layernorm.quantize_output(fused_input_scale(self.mlp.gate_up))

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        meta: BatchMetadata,
        kv_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # x [T, hidden]: the previous layer's output, not yet added to residual [T, hidden]
        # (None before the first layer) -> (this layer's output, its residual)
        if residual is None:
            x, residual = self.input_layernorm(x), x
        else:
            x, residual = self.input_layernorm(x, residual)
        x = self.attention(x, meta, kv_cache)
        x, residual = self.post_layernorm(x, residual)
        return self.mlp(x), residual


class LlamaForCausalLM(nn.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        weights: dict[str, torch.Tensor],
        dtype: torch.dtype,
        device: torch.device,
        max_positions: int,
        mapping: Mapping = SINGLE_RANK,
        tp: TensorParallel = SINGLE,
        place_layer: Callable[[int, nn.Module], nn.Module] | None = None,
    ):
        # place_layer(i, layer): each decoder layer as soon as it is built (weight offload
        # moves a streamed layer to host memory before the next one is built)
        super().__init__()
        place = place_layer or (lambda i, layer: layer)
        self.vocab_size, self.hidden_size, self.dtype, self.tp = (
            cfg.vocab_size,
            cfg.hidden_size,
            dtype,
            tp,
        )
        self.is_first_stage, self.is_last_stage = mapping.is_first_stage, mapping.is_last_stage
        embedding_name = "transformer.vocab_embedding.weight"
        if self.is_first_stage:
            table = vocab_slice(_tensor(weights, embedding_name, dtype, device), cfg.vocab_size, tp)
            self.embedding = VocabParallelEmbedding(table, tp)  # [vocab / tp, hidden]
        rotary = RotaryEmbedding(
            cfg.head_dim, max_positions, cfg.rotary_base, cfg.rotary_scaling, dtype, device
        )
        self.layers = nn.ModuleList(
            place(i, LlamaDecoderLayer(cfg, weights, i, rotary, dtype, device, mapping, tp))
            for i in range(len(mapping.layers(cfg.num_layers)))
        )
        if not self.is_last_stage:
            return
        self.ln_f = RMSNorm(
            _tensor(weights, "transformer.ln_f.weight", dtype, device), cfg.norm_epsilon
        )
        if "lm_head.weight" not in weights and embedding_name in weights:
            # TensorRT-LLM allows sharing the embedding
            weights = {**weights, "lm_head.weight": weights[embedding_name]}
        self.lm_head = build_linear(weights, ["lm_head"], cfg.quantization, dtype, device)

    def stage_inputs(self, num_rows: int, device: torch.device) -> torch.Tensor:
        """A buffer for this stage's inputs: token ids [rows] (first stage) or [rows, 2, hidden]."""
        if self.is_first_stage:
            return torch.zeros(num_rows, dtype=torch.int64, device=device)
        return torch.zeros(num_rows, 2, self.hidden_size, dtype=self.dtype, device=device)

    def forward(
        self, inputs: torch.Tensor, meta: BatchMetadata, kv_cache: torch.Tensor
    ) -> torch.Tensor:
        # inputs: ids [T] or [T, 2, hidden]; kv_cache [L, 2, NB, BS, Hkv, D] (this stage's L)
        # -> hidden [T, hidden] (last stage) or [T, 2, hidden] for the next stage
        if self.is_first_stage:
            x, residual = self.embedding(inputs), None
        else:
            x, residual = inputs[:, 0], inputs[:, 1]
        for i, layer in enumerate(self.layers):
            x, residual = layer(x, residual, meta, kv_cache[i])
        if self.is_last_stage:
            return self.ln_f(x, residual)[0]
        return torch.stack((x, residual), dim=1)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        # [S, hidden] -> [S, vocab] float32 (drops vocab padding of a TP-split head)
        return gather_logits(self.lm_head(hidden), self.vocab_size, self.tp)
