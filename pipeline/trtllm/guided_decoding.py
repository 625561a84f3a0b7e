"""Guided decoding on the tensorrtllm backend: its C++ executor takes the tokenizer as xgrammar
tokenizer info, a JSON file that deploy writes into the `tensorrt_llm` model's directory.

Upstream's step (TensorRT-LLM 1.2 examples/generate_xgrammar_tokenizer_info.py, run as
tensorrtllm_backend docs/guided_decoding.md shows) writes `xgrammar_tokenizer_info.json` from
tensorrt_llm/llmapi/tokenizer.py's _xgrammar_tokenizer_info: for a fast tokenizer,
{"encoded_vocab": the tokens in id order, "tokenizer_str": the Rust tokenizer's JSON,
"stop_token_ids": [eos]}, from which the executor builds xgrammar's TokenizerInfo. The same
file is written here, without TensorRT-LLM installed.
"""

import json
from pathlib import Path

from pipeline.errors import ConfigError

BACKENDS = ("", "xgrammar")  # "": off (the parameters are written empty, as upstream's template)
TOKENIZER_INFO = "xgrammar_tokenizer_info.json"


def check_backend(name: str) -> list[str]:
    if name in BACKENDS:
        return []
    return [
        f"deploy.trtllm.guided_decoding_backend={name!r}: use xgrammar, or leave it empty (off)"
    ]


def tokenizer_info(tokenizer) -> dict:
    """Upstream's tokenizer info of a transformers fast tokenizer."""
    from transformers import PreTrainedTokenizerFast

    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        raise ConfigError(
            f"deploy.trtllm.guided_decoding_backend=xgrammar: the tokenizer is "
            f"{type(tokenizer).__name__}, not a fast (tokenizer.json) tokenizer; convert it, or "
            f"leave guided_decoding_backend empty"
        )
    vocab = tokenizer.get_vocab()
    return {
        "encoded_vocab": [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])],
        "tokenizer_str": tokenizer.backend_tokenizer.to_str(),
        "stop_token_ids": [tokenizer.eos_token_id],
    }


def write_tokenizer_info(tokenizer_dir: Path, out_dir: Path) -> Path:
    from transformers import AutoTokenizer

    path = Path(out_dir) / TOKENIZER_INFO
    info = tokenizer_info(AutoTokenizer.from_pretrained(tokenizer_dir))
    path.write_text(json.dumps(info))
    return path
