"""GGUF -> HF safetensors directory, dequantized by transformers (`gguf_file=`).

Works around what transformers 5 does when saving a GGUF-loaded model (see shared notes): it
refuses to save, writes rope only under rope_parameters, and names a tokenizer class 4.x can't load.
"""

import functools
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)


def gguf_to_hf(gguf_path: Path, out_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("fetch: dequantizing %s", gguf_path.name)
    folder, name = str(gguf_path.parent), gguf_path.name
    with _parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype="float32")
    # the weights are plain floats now; drop the gguf quantizer so save_pretrained accepts them
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    _patch_config(out_dir / "config.json")
    _patch_tokenizer_config(out_dir / "tokenizer_config.json")


@contextmanager
def _parsed_once() -> Iterator[None]:
    """transformers parses the file for the config, again for the tokenizer and again for the
    weights (each parse walks the whole vocabulary: ~6 s for SmolLM2's 49k tokens), and builds
    gguf's tensor-name map once per module (~400 times, ~8 s): here each is made once. transformers
    imports both from the gguf module when it calls them, so they are swapped there meanwhile."""
    import gguf

    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers = {}

    def reader(path, mode="r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map


def _patch_config(path: Path) -> None:
    config = json.loads(path.read_text())
    rope = config.get("rope_parameters") or {}
    if "rope_theta" not in config and "rope_theta" in rope:
        config["rope_theta"] = rope["rope_theta"]  # 4.x readers default to 10000 otherwise
    config.pop("quantization_config", None)
    path.write_text(json.dumps(config, indent=2, sort_keys=True))


def _patch_tokenizer_config(path: Path) -> None:
    if not path.is_file():
        return
    config = json.loads(path.read_text())
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2, sort_keys=True))
