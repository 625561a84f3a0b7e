"""A stream's text pieces concatenate to the decode of all its tokens at once, whatever the
chunking; a character split over tokens is held back until whole (byte-level BPE, trained here)."""

import random

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from pipeline.triton_models.detokenizer import Detokenizer

ASCII = "the quick brown fox jumps over the lazy dog, mixed with Paris and a naive facade"
TEXTS = [
    "Le café à Paris coûte 3 €, naïve façade.",
    "日本の首都は東京です。中文：你好，世界。",
    "Emoji story: 🙂🙂😉 👩‍👩‍👧 done",
    "Ελληνικά και Русский текст, mixed with ASCII.",
]


@pytest.fixture(scope="module")
def detokenizer(tmp_path_factory) -> Detokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    # merges for ASCII words; every other character stays split into its bytes
    tokenizer.train_from_iterator([ASCII] * 4, trainer)
    path = tmp_path_factory.mktemp("tokenizer")
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>"
    ).save_pretrained(path)
    return Detokenizer(path, skip_special_tokens=True)


def chunks(ids: list[int], rng: random.Random) -> list[list[int]]:
    out, start = [], 0
    while start < len(ids):
        size = rng.choice([1, 1, 1, 2, 3, 8])
        out.append(ids[start : start + size])
        start += size
    return out


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_concatenate_to_the_whole_decode(detokenizer, text):
    ids = detokenizer.tokenizer.encode(text, add_special_tokens=False)
    assert any("\ufffd" in detokenizer.decode([i]) for i in ids)  # split characters
    rng = random.Random(0)
    for _ in range(20):
        stream = detokenizer.stream()
        parts = chunks(ids, rng)
        pieces = [stream.add(part, i == len(parts) - 1) for i, part in enumerate(parts)]
        assert "".join(pieces) == detokenizer.decode(ids) == text
        assert not any("\ufffd" in piece for piece in pieces)


def test_an_unfinished_character_at_the_end_is_sent_as_decoded(detokenizer):
    ids = detokenizer.tokenizer.encode("ab日", add_special_tokens=False)[:-1]
    stream = detokenizer.stream()
    pieces = [stream.add([i], False) for i in ids] + [stream.add([], True)]
    assert "".join(pieces) == detokenizer.decode(ids) and pieces[-1].endswith("\ufffd")


def test_special_tokens_are_skipped(detokenizer):
    tokenizer = detokenizer.tokenizer
    ids = [tokenizer.bos_token_id, *tokenizer.encode("café 🙂", add_special_tokens=False)]
    ids.append(tokenizer.eos_token_id)
    stream = detokenizer.stream()
    pieces = [stream.add([i], i == ids[-1]) for i in ids]
    assert "".join(pieces) == "café 🙂" == detokenizer.decode(ids)


def test_whole_output_in_one_chunk(detokenizer):
    ids = detokenizer.tokenizer.encode(TEXTS[1], add_special_tokens=False)
    assert detokenizer.stream().add(ids, True) == TEXTS[1]
