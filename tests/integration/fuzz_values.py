"""The values a fuzzed request is made of: for every client input of the served models, values
the server must serve, and nasty ones with what it may do about each: INVALID must be refused
with an error that names the input, EITHER may be served or refused (naming it). Nasty values sit
just past the served engine's limits (vocabulary, max_input_len, max_seq_len), so they hold for
any checkpoint; generated lengths stay at MAX_TOKENS, so a case costs a CPU about a second.
"""

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

VALID, EITHER, INVALID = "valid", "either", "invalid"
GRPC, HTTP, HTTP_STREAM = "grpc", "http", "http_stream"
I32_MIN, I32_MAX, U64_MAX = -(2**31), 2**31 - 1, 2**64 - 1
NAN, INF = float("nan"), float("inf")
MAX_TOKENS = 8
PROMPTS = ("The capital of France is", "Hi", "Water boils at", "日本の首都は", "🙂 emoji:", " ")
WORDS = (".", " Paris", "\n", "the", "日本", "")
# Triton data types a client can build with numpy (not BF16)
NUMPY_DTYPES = {
    "TYPE_STRING": "object",
    "TYPE_BOOL": "bool",
    **{f"TYPE_{t.upper()}": t for t in ("int8", "int16", "int32", "int64", "uint8", "uint32")},
    **{f"TYPE_{t.upper()}": t for t in ("uint64",)},
    **{f"TYPE_FP{b}": f"float{b}" for b in (16, 32, 64)},
}


@dataclass(frozen=True, slots=True)
class Limits:
    """What the served engine can take: nasty values are placed just past these."""

    vocab_size: int
    max_input_len: int
    max_seq_len: int


@dataclass(frozen=True, slots=True)
class Value:
    data: object  # str, bytes, int, float, bool or a list of them; the JSON value over HTTP
    layout: str = "scalar"  # gRPC shape: scalar [1, 1], list [1, n], words [1, 2, n], raw as is
    dtype: str | None = None  # a numpy dtype name for gRPC, else the input's own


def words_list(words: list[list[int]]) -> list[list[int]]:
    """Token-id words -> the [2, N] list: the ids, then each word's cumulative end offset."""
    if not words:
        return [[0], [-1]]  # as preprocessing writes no words
    ids = [t for word in words for t in word]
    ends = np.cumsum([len(w) for w in words]).tolist()
    return [ids, ends + [-1] * (len(ids) - len(ends))]


def _texts():
    unicode = st.text(st.characters(codec="utf-8"), min_size=1, max_size=24)
    return st.sampled_from(PROMPTS) | unicode


def valid_value(name: str, protocol: str, limits: Limits, draw) -> Value | None:
    """A value the server must serve; None for an input whose meaning is not known here."""
    token = st.integers(0, limits.vocab_size - 1)
    if name == "text_input":
        return Value(draw(_texts()))
    if name in ("max_tokens", "request_output_len"):
        return Value(draw(st.integers(1, MAX_TOKENS)))
    if name in ("stop_words", "bad_words"):
        word = st.sampled_from(WORDS) | st.text(st.characters(codec="utf-8"), max_size=6)
        return Value(draw(st.lists(word, max_size=3)), "list")
    if name in ("stop_words_list", "bad_words_list"):
        words = draw(st.lists(st.lists(token, min_size=1, max_size=3), max_size=3))
        return Value(words_list(words), "words")
    if name in ("end_id", "pad_id"):
        return Value(draw(token))
    if name == "temperature":
        return Value(draw(st.just(0.0) | st.floats(0.125, 2.0, width=32)))
    if name in ("top_k", "runtime_top_k"):
        return Value(draw(st.integers(0, 50)))
    if name in ("top_p", "runtime_top_p"):
        return Value(draw(st.just(0.0) | st.floats(0.0625, 1.0, width=32)))
    if name == "seed":
        return Value(draw(st.integers(0, U64_MAX)))
    if name in ("stream", "streaming"):  # /generate takes one response only
        return Value(False if protocol == HTTP else draw(st.booleans()))
    if name == "exclude_input_in_output":
        return Value(draw(st.booleans()))
    return None


def nasty_values(
    name: str, protocol: str, limits: Limits, data_type: str = ""
) -> list[tuple[object, str]]:
    """(value, EITHER or INVALID) for one input; HTTP-only values are JSON a proto can't carry.
    An input not known here (data_type: its Triton type) gets its type's extremes, as EITHER."""
    vocab = limits.vocab_size
    grpc, http = protocol == GRPC, protocol != GRPC
    ints, reals = [("8", INVALID), (8.5, INVALID), (None, INVALID)], [("0.5", INVALID)]
    table = {
        "text_input": [
            ("", EITHER),
            (" hello" * (limits.max_input_len + 8), INVALID),
            ("\x00", EITHER),
            *([(b"\xff\xfe", INVALID), (b"Hi \xc3", INVALID)] if grpc else []),
            *([(5, INVALID), ({"a": 1}, INVALID), (None, INVALID)] if http else []),
            *([(["Hi", "Yo"], EITHER)] if http else []),
        ],
        "max_tokens": [
            (0, EITHER),
            *((v, INVALID) for v in (-1, I32_MIN, I32_MAX, limits.max_seq_len)),
            *([(10**12, INVALID), (-(2**63), INVALID), (2**64, INVALID)] if http else []),
            *([([4], EITHER), *ints] if http else []),
        ],
        "end_id": [
            *((v, EITHER) for v in (-1, vocab, 999_999_999, I32_MIN, I32_MAX)),
            *([(10**10, EITHER), ("2", INVALID)] if http else []),
        ],
        # the sampler scales logits by these: past their float32-safe ranges they are refused
        "temperature": [
            *((v, INVALID) for v in (NAN, INF, -INF, -1.0, -1e-30, 1e30, 3.4e38)),
            *((v, EITHER) for v in (1e-45, 1e6, -0.0)),
            *(reals if http else []),
        ],
        "repetition_penalty": [
            *((v, INVALID) for v in (NAN, INF, 0.0, -1.0, 1e-30, 3.4e38)),
            *((v, EITHER) for v in (1e-6, 1e6)),
        ],
        "presence_penalty": [
            *((v, INVALID) for v in (NAN, -INF, 2.5, 3.4e38, -3.4e38)),
            *((v, EITHER) for v in (-2.0, 2.0)),
        ],
        "top_k": [
            (-1, INVALID),
            (I32_MIN, INVALID),
            (I32_MAX, EITHER),
            (vocab + 1, EITHER),
            *([(5.5, INVALID), (2**40, EITHER)] if http else []),
        ],
        "top_p": [
            *((v, INVALID) for v in (NAN, INF, -INF, -0.5, 1.5)),
            *((v, EITHER) for v in (1e-45, -0.0)),
            *(reals if http else []),
        ],
        "seed": [(-1, INVALID), (2**64, INVALID), (1.5, INVALID), ("7", INVALID)] if http else [],
        "stream": [(1, INVALID), ("yes", INVALID)] if http else [],
        "exclude_input_in_output": [(1, INVALID), (None, INVALID)] if http else [],
        "stop_words": [
            (["x" * 300], EITHER),
            *([([b"\xff"], INVALID)] if grpc else []),
            *([(".", EITHER), ([1, 2], INVALID), ([["a"]], EITHER)] if http else []),
        ],
    }
    if protocol == HTTP:  # streaming on /generate: Triton wants exactly one response
        table["stream"] += [(True, EITHER)]
    table |= {
        "request_output_len": table["max_tokens"],
        "pad_id": table["end_id"],
        "bad_words": table["stop_words"],
        "runtime_top_k": table["top_k"],
        "runtime_top_p": table["top_p"],
        "streaming": table["stream"],
        "frequency_penalty": table["presence_penalty"],
    }
    by_type = {
        "TYPE_INT32": [I32_MIN, -1, 0, I32_MAX],
        "TYPE_FP32": [NAN, -INF, 0.0],
        "TYPE_FP16": [NAN, INF],
        "TYPE_UINT64": [0, U64_MAX],
        "TYPE_BOOL": [True, False],
        "TYPE_STRING": ["", "\x00"],
    }
    return table.get(name, [(v, EITHER) for v in by_type.get(data_type, [])])


def out_of_vocabulary(limits: Limits) -> tuple[int, ...]:
    return (limits.vocab_size, 999_999_999, -1, I32_MIN)


def nasty_ids(ids: list[int], protocol: str, limits: Limits, draw) -> tuple[Value, str]:
    """input_ids: empty, or one id outside the vocabulary; over HTTP also the wrong JSON."""
    bad = draw(st.sampled_from(out_of_vocabulary(limits)))
    at = draw(st.integers(0, len(ids)))
    choices = [(Value([], "list"), INVALID), (Value([*ids[:at], bad, *ids[at:]], "list"), INVALID)]
    if protocol != GRPC:
        choices += [(Value("1 2"), INVALID), (Value([ids]), INVALID)]
    return draw(st.sampled_from(choices))


def nasty_lengths(num_ids: int, protocol: str) -> list[tuple[object, str]]:
    """input_lengths against input_ids holding num_ids tokens."""
    choices = [(v, INVALID) for v in (0, -1, num_ids + 1, I32_MAX, I32_MIN)]
    if num_ids > 1:  # a padded prompt: the first input_lengths ids are the prompt
        choices.append((num_ids - 1, EITHER))
    return choices + ([("3", INVALID)] if protocol != GRPC else [])


def nasty_words_list(words: list[list[int]], protocol: str, limits: Limits, draw):
    """stop_words_list / bad_words_list ([2, N]: ids, cumulative end offsets padded with -1):
    an id outside the vocabulary inside a word, malformed offsets, the wrong number of rows."""
    ids = words[0]
    bad = draw(st.sampled_from(out_of_vocabulary(limits)))
    word = [*draw(st.lists(st.integers(0, limits.vocab_size - 1), max_size=2)), bad]
    choices = [
        (Value(words_list([word]), "words"), INVALID),
        (Value([[1, 2, 3], [3, 1, -1]], "words"), EITHER),  # ends decreasing
        (Value([[1, 2], [5, -1]], "words"), EITHER),  # an end past the ids
        (Value([[1, 2], [-7, 2]], "words"), EITHER),  # a negative end that is not padding
        (Value([[1, 2], [I32_MAX, -1]], "words"), EITHER),
        (Value([ids, [-1] * len(ids)], "words"), EITHER),  # ids with no word
        (Value([[ids[0]], [1], [1]], "words"), INVALID),  # three rows
    ]
    if protocol == GRPC:
        choices.append((Value([[ids[0], 1]], "raw"), INVALID))  # [1, 2]: no word dim
    else:
        choices.append((Value([ids[0]]), INVALID))  # one value: no [2, N] shape fits it
    return draw(st.sampled_from(choices))


def broken_body(body: bytes, draw) -> bytes:
    """A JSON body as a careless client or a proxy might send it."""
    cut = draw(st.integers(1, max(1, len(body) - 1)))
    return draw(
        st.sampled_from(
            (body[:cut], b"", b"[" + body + b"]", b"null", body[:cut] + b"\xff" + body[cut:])
        )
    )
