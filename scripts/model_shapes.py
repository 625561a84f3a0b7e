"""Models in a known shape with random weights, as checkpoints and engines the pipeline builds.

An engine's speed does not depend on its weights' values (EOS is ignored or requests run to
max_tokens), so the tools measure published shapes (pipeline.synthetic.shapes) without their
weights. The checkpoint is written by the pipeline's own converter and the engine by the torch
backend's build, so what is measured is what `python -m pipeline build` makes.
"""

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from pipeline.backends.torch_backend import build_engine_dir
from pipeline.checkpoint.hf_to_trtllm import rank_tensors
from pipeline.checkpoint.trtllm_config import pretrained_config
from pipeline.specs.build import BuildSpec
from scripts.engine_run import Workload

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


def new_model(config, dtype: torch.dtype, device: torch.device):
    """A transformers causal LM built directly in dtype on device, with transformers' own
    random init (an fp32 8B would not fit beside its bf16 copy; the meta device would leave the
    rotary buffers empty)."""
    from transformers import AutoModelForCausalLM

    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return AutoModelForCausalLM.from_config(config).eval()
    finally:
        torch.set_default_dtype(default_dtype)


def random_hf_model(shape: dict, dtype: torch.dtype, device: torch.device):
    """A Llama of this shape with random weights (seed 0), EOS off."""
    from transformers import LlamaConfig

    config = LlamaConfig(**shape, eos_token_id=None, bos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    return new_model(config, dtype, device)


class ModelTensors:
    """A loaded model's tensors by HF name, read as the converter reads a checkpoint dir."""

    def __init__(self, model) -> None:
        self.config = {**model.config.to_dict(), "architectures": [type(model).__name__]}
        self._tensors = model.state_dict()

    def has(self, name: str) -> bool:
        return name in self._tensors

    def get(self, name: str) -> torch.Tensor:
        # a host copy: tied embeddings share memory, which safetensors refuses to write
        return self._tensors[name].detach().to("cpu", copy=True)


def write_checkpoint(model, dtype: str, out_dir: Path, num_layers: int | None = None) -> Path:
    """The TensorRT-LLM checkpoint (one rank) that `python -m pipeline convert` would write for
    this model's weights; num_layers: only its first blocks (with its final norm and head)."""
    source = ModelTensors(model)
    if num_layers is not None:  # the converter reads blocks 0 .. num_hidden_layers - 1
        source.config["num_hidden_layers"] = num_layers
    cfg = pretrained_config(source.config, dtype, 1, 1)
    tensors = rank_tensors(source, cfg, 0, getattr(torch, dtype))
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, out_dir / "rank0.safetensors", metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    return out_dir


def write_tokenizer(vocab_size: int, out_dir: Path) -> Path:
    """A word-level tokenizer over the whole vocab: the tools feed token ids, and an engine dir
    needs a tokenizer to load."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(out_dir)
    return out_dir


def build_engine(ckpt_dir: Path, tokenizer_dir: Path, out_dir: Path, work: Workload) -> Path:
    """The torch backend's build of the checkpoint, limits sized for the workload."""
    build = BuildSpec(
        max_batch_size=work.max_batch_size,
        max_input_len=work.input_len,
        max_seq_len=work.input_len + work.output_len,
        max_num_tokens=max(8192, work.input_len),
        tokens_per_block=32,
    )
    out_dir.mkdir(parents=True)
    build_engine_dir(build, ckpt_dir, tokenizer_dir, out_dir)
    return out_dir


def random_weights_dir(shape_dir: Path, dtype: str, out_dir: Path) -> Path:
    """An HF directory at out_dir: shape_dir's config and tokenizer files, random weights (any
    architecture transformers knows)."""
    from transformers import AutoConfig

    if not (out_dir / "config.json").is_file():
        torch.manual_seed(0)
        # an 8B model's random init takes minutes on the CPU, seconds on a GPU
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = new_model(AutoConfig.from_pretrained(shape_dir), getattr(torch, dtype), device)
        model.save_pretrained(out_dir)
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # what runs next may run in another process on this GPU
        for path in shape_dir.iterdir():  # tokenizer, chat template: all but weights and config
            is_weights = path.suffix in WEIGHT_SUFFIXES
            if path.is_file() and not is_weights and not (out_dir / path.name).exists():
                shutil.copy2(path, out_dir / path.name)
    return out_dir
