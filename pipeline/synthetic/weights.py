"""Random weights of a Llama-family shape for one rank of a tensor / pipeline split, made on the
device when the engine reads each tensor (nothing on disk: a 70B model's rank files would be
~70 GB to write and read back, and holding a rank's whole dict beside the model it builds would
need twice its memory).

Every tensor is drawn whole from a generator seeded by its name, then split the way convert
splits it (pipeline/checkpoint/hf_to_trtllm.py), so each rank of any mapping holds the slices of
the same model: TP=2 and TP=1 engines built from it compute the same function. FP8 linears are
those weights over a fixed per-tensor scale, with the tensors modelopt's export writes.

    engine dir: write_engine(...) (config.json + tokenizer, the torch backend's build layout)
    runtime:    LLMEngine.from_engine_dir(dir, weights_loader=HOOK)
"""

import json
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import torch

from pipeline.backends.torch_backend import build_engine_dir
from pipeline.checkpoint.sharding import pad_rows, pp_layers, split, split_kv
from pipeline.checkpoint.trtllm_config import pretrained_config
from pipeline.engine.quant.primitives import to_fp8
from pipeline.engine_json import EngineJson
from pipeline.specs.build import BuildSpec

HOOK = "pipeline.synthetic.weights:synthetic_weights"
STD = 0.02
FP8_SCALE = 4 * STD / 448  # weights past 4 sigma saturate
FP8_ACT_SCALE = 4.0 / 448
QUANTIZATION = {
    None: {"quant_algo": None, "kv_cache_quant_algo": None},
    "FP8": {"quant_algo": "FP8", "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]},
}


def checkpoint_config(shape: dict, dtype: str, tp: int, pp: int, quant: str | None) -> dict:
    hf = {"architectures": ["LlamaForCausalLM"], **shape}
    return pretrained_config(hf, dtype, tp, pp, dict(QUANTIZATION[quant]))


def write_engine(cfg: dict, build: BuildSpec, tokenizer_dir: Path, out_dir: Path) -> Path:
    """The torch build of a checkpoint whose rank files are empty placeholders: its weights come
    from HOOK."""
    ckpt = out_dir.with_name(out_dir.name + "-ckpt")
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text(json.dumps(cfg, indent=2))
    for rank in range(cfg["mapping"]["world_size"]):
        (ckpt / f"rank{rank}.safetensors").touch()
    out_dir.mkdir(parents=True)
    build_engine_dir(build, ckpt, tokenizer_dir, out_dir, probe_device=None)  # no weights to probe
    return out_dir


def synthetic_weights(engine_dir: Path, rank: int, device: torch.device) -> "SyntheticWeights":
    return SyntheticWeights(EngineJson.read(engine_dir).pretrained, rank, device)


class SyntheticWeights(Mapping):
    def __init__(self, cfg: dict, rank: int, device: torch.device):
        self.device = torch.device(device)
        self.dtype = getattr(torch, cfg["dtype"])
        tp, pp = cfg["mapping"]["tp_size"], cfg["mapping"]["pp_size"]
        tp_rank, pp_rank = rank % tp, rank // tp
        is_fp8 = (cfg["quantization"] or {}).get("quant_algo") == "FP8"
        hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
        heads, kv_heads, head = (
            cfg["num_attention_heads"],
            cfg["num_key_value_heads"],
            cfg["head_size"],
        )
        rows = lambda t, dim: split(t, tp, tp_rank, dim)  # noqa: E731
        self._makers: dict[str, Callable[[], torch.Tensor]] = {}
        if pp_rank == 0:
            self._add("transformer.vocab_embedding.weight", (cfg["vocab_size"], hidden))
        for local, layer in enumerate(pp_layers(cfg["num_hidden_layers"], pp, pp_rank)):
            src, dst = f"layers.{layer}.", f"transformer.layers.{local}."
            for norm in ("input_layernorm", "post_layernorm"):
                self._makers[f"{dst}{norm}.weight"] = self._ones(hidden)

            def qkv(src=src) -> torch.Tensor:
                q = self._draw(src + "q", (heads * head, hidden))
                k = self._draw(src + "k", (kv_heads * head, hidden))
                v = self._draw(src + "v", (kv_heads * head, hidden))
                parts = (
                    split(q, tp, tp_rank, 0),
                    *(split_kv(t, kv_heads, tp, tp_rank) for t in (k, v)),
                )
                return torch.cat(parts)

            linears = {
                "attention.qkv": qkv,
                "attention.dense": self._part(src + "o", (hidden, heads * head), rows, 1),
                "mlp.fc": self._part(src + "gate", (inter, hidden), rows, 0),
                "mlp.gate": self._part(src + "up", (inter, hidden), rows, 0),
                "mlp.proj": self._part(src + "down", (hidden, inter), rows, 1),
            }
            for name, make in linears.items():
                self._add_linear(dst + name, make, is_fp8)
        if pp_rank == pp - 1:
            self._makers["transformer.ln_f.weight"] = self._ones(hidden)
            head_weight = self._part("lm_head", (cfg["vocab_size"], hidden), None, 0)
            self._makers["lm_head.weight"] = lambda: split(
                pad_rows(head_weight(), tp), tp, tp_rank, 0
            )

    def _draw(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        g = torch.Generator(self.device).manual_seed(zlib.crc32(name.encode()))
        return (torch.randn(shape, generator=g, device=self.device) * STD).to(self.dtype)

    def _part(self, name, shape, rows, dim) -> Callable[[], torch.Tensor]:
        return lambda: (
            self._draw(name, shape) if rows is None else rows(self._draw(name, shape), dim)
        )

    def _ones(self, n: int) -> Callable[[], torch.Tensor]:
        return lambda: torch.ones(n, dtype=self.dtype, device=self.device)

    def _add(self, name: str, shape: tuple[int, ...]) -> None:
        self._makers[name] = lambda: self._draw(name, shape)

    def _add_linear(self, prefix: str, make: Callable[[], torch.Tensor], is_fp8: bool) -> None:
        if not is_fp8:
            self._makers[f"{prefix}.weight"] = make
            return
        self._makers[f"{prefix}.weight"] = lambda: to_fp8(make().float() / FP8_SCALE)
        for suffix, scale in (
            ("weights_scaling_factor", FP8_SCALE),
            ("activation_scaling_factor", FP8_ACT_SCALE),
        ):
            self._makers[f"{prefix}.{suffix}"] = lambda s=scale: torch.tensor(
                [s], device=self.device
            )

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._makers[name]()

    def __contains__(self, name: object) -> bool:  # without drawing the tensor
        return name in self._makers

    def __iter__(self) -> Iterator[str]:
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)
