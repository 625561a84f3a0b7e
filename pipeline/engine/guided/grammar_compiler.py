"""Grammars compiled for one tokenizer, cached by their text.

Compiling a JSON schema walks the whole vocabulary (tens of ms for a 49k vocabulary, more for a
128k one), so the same schema sent again takes the compiled grammar from an LRU of the last
MAX_CACHED grammars instead. Compiling is thread-safe (xgrammar's compiler is, the LRU has a
lock): a request is compiled by whoever validates it, before the engine thread adds it.
"""

import threading
from collections import OrderedDict

import xgrammar

from pipeline.request.guided import GuidedDecoding

MAX_CACHED = 256  # compiled grammars kept (each holds per-state token masks: ~0.1-10 MB)


def tokenizer_info(tokenizer, vocab_size: int, stop_token_ids: tuple[int, ...]):
    """xgrammar's view of a Hugging Face tokenizer over the model's logits width (vocab_size:
    ids past the tokenizer's own are never allowed)."""
    return xgrammar.TokenizerInfo.from_huggingface(
        tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_token_ids) or None
    )


class GrammarCompiler:
    def __init__(self, info: "xgrammar.TokenizerInfo", max_cached: int = MAX_CACHED):
        self.info = info
        self.vocab_size = info.vocab_size
        self._compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self._cache: OrderedDict[GuidedDecoding, xgrammar.CompiledGrammar] = OrderedDict()
        self._max_cached = max_cached
        self._lock = threading.Lock()
        self.num_compiled = 0  # cache misses

    def compile(self, guide: GuidedDecoding) -> "xgrammar.CompiledGrammar":
        """The compiled grammar; ValueError ("request: ...") for a guide xgrammar refuses."""
        with self._lock:
            compiled = self._cache.get(guide)
            if compiled is not None:
                self._cache.move_to_end(guide)
                return compiled
        compiled = self._compile(guide)  # outside the lock: other guides compile meanwhile
        with self._lock:
            self.num_compiled += 1
            self._cache[guide] = compiled
            self._cache.move_to_end(guide)
            while len(self._cache) > self._max_cached:
                self._cache.popitem(last=False)
        return compiled

    def _compile(self, guide: GuidedDecoding) -> "xgrammar.CompiledGrammar":
        compiler = self._compiler
        try:
            # JSON with one space after ',' and ':' and none elsewhere: with any whitespace
            # allowed, small models fill their max_tokens with newlines
            if guide.type == "json":  # any JSON value (the empty schema)
                return compiler.compile_json_schema("{}", any_whitespace=False)
            if guide.type == "json_schema":
                return compiler.compile_json_schema(guide.text, any_whitespace=False)
            if guide.type == "regex":
                return compiler.compile_regex(guide.text)
            return compiler.compile_grammar(guide.text)
        except Exception as exc:  # noqa: BLE001 - xgrammar raises RuntimeError and others
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise ValueError(
                f"request: guided_decoding_guide ({guide.type}) does not compile: {first_line}; "
                f"fix the {guide.type.replace('_', ' ')}"
            ) from None
