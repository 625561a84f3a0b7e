"""A byte-level BPE tokenizer of any vocabulary size, made offline: the 256 byte tokens, then
random 2-6 character words of letters, digits and spaces up to vocab_size - 1, then `</s>`
(its end token). Enough for a grammar to mean something on random weights: JSON's punctuation
exists only as single-byte tokens, while a string's content has most of the vocabulary to
choose from, as in a real tokenizer."""

import random
from pathlib import Path

WORD_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789    "
EOS = "</s>"


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (what byte-level BPE vocabularies spell)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def write_byte_tokenizer(vocab_size: int, out_dir: Path, seed: int = 0) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_chars = bytes_to_unicode()
    tokens = [byte_chars[b] for b in range(256)]
    seen, rng = set(tokens), random.Random(seed)
    while len(tokens) < vocab_size - 1:
        word = "".join(rng.choice(WORD_CHARS) for _ in range(rng.randint(2, 6)))
        spelled = "".join(byte_chars[b] for b in word.encode())
        if spelled not in seen:
            seen.add(spelled)
            tokens.append(spelled)
    tokens.append(EOS)
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS).save_pretrained(out_dir)
    return out_dir
