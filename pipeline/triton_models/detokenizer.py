"""Token ids -> text for the torch `tensorrt_llm` model, whole or one stream's piece at a time.

Decoding is postprocessing's (the same tokenizer files and skip_special_tokens), so text_output
from the LLM model equals what the upstream ensemble's postprocessing step writes. A stream's
pieces concatenate to the decode of all its tokens at once: vLLM's prefix/read offsets hold back
a piece while it ends in an incomplete character (U+FFFD), and the stream's last piece is cut
from the decode of all its tokens. A fast tokenizer that does not clean up spaces decodes a
stream's windows through its Rust tokenizer straight away (what transformers' decode does for
it, at ~1 us a call instead of ~3 us).
"""

import logging
from functools import partial
from pathlib import Path

log = logging.getLogger(__name__)
INCOMPLETE = "\ufffd"  # what decode makes of the first bytes of a character split over tokens


class Detokenizer:
    def __init__(self, tokenizer_dir: Path, skip_special_tokens: bool):
        from transformers import AutoTokenizer

        # as postprocessing loads it
        self.tokenizer = AutoTokenizer.from_pretrained(
            str(tokenizer_dir), legacy=False, padding_side="left"
        )
        self.skip_special_tokens = skip_special_tokens
        fast = getattr(self.tokenizer, "backend_tokenizer", None)
        if fast is not None and not self.tokenizer.clean_up_tokenization_spaces:
            self._decode_window = partial(fast.decode, skip_special_tokens=skip_special_tokens)
        else:
            self._decode_window = self.decode

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=self.skip_special_tokens)

    def stream(self) -> "TextStream":
        return TextStream(self._decode_window, self.decode)


class TextStream:
    """One stream's text: add() each chunk of new tokens, get the text they complete."""

    def __init__(self, decode_window, decode):
        self._decode_window = decode_window
        self._decode = decode
        self.token_ids: list[int] = []
        self._pieces: list[str] = []  # sent so far
        # the decode window starts at _prefix_offset: tokens up to _read_offset were sent and
        # only give the next piece its context (a leading space, a merged character)
        self._prefix_offset = 0
        self._read_offset = 0

    def add(self, token_ids: list[int], is_final: bool) -> str:
        self.token_ids.extend(token_ids)
        if is_final:
            return self._finish()
        if len(self.token_ids) == self._read_offset:
            return ""
        sent = self._decode_window(self.token_ids[self._prefix_offset : self._read_offset])
        window = self._decode_window(self.token_ids[self._prefix_offset :])
        if len(window) <= len(sent) or window.endswith(INCOMPLETE):
            return ""  # a character still lacks bytes (or the tokens made no text yet)
        piece = window[len(sent) :]
        self._prefix_offset, self._read_offset = self._read_offset, len(self.token_ids)
        self._pieces.append(piece)
        return piece

    def decode_whole(self, token_ids: list[int]) -> str:
        """Other tokens' text at once (a beam-search request's beams), this stream untouched."""
        return self._decode(token_ids)

    def _finish(self) -> str:
        """The rest of the decode of all tokens, unfinished characters included."""
        whole, sent = self._decode(self.token_ids), "".join(self._pieces)
        if whole.startswith(sent):
            return whole[len(sent) :]
        log.warning("streamed text %r is not a prefix of the whole decode %r", sent, whole)
        done = self._decode_window(self.token_ids[self._prefix_offset : self._read_offset])
        return self._decode_window(self.token_ids[self._prefix_offset :])[len(done) :]
