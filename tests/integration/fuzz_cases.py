"""Hypothesis strategies for whole requests to `ensemble`, `tensorrt_llm_bls` (ENSEMBLE_INPUTS)
and the torch `tensorrt_llm` (TORCH_LLM_INPUTS), over gRPC, HTTP /generate or /generate_stream.

A case is a valid request with up to three things made nasty (fuzz_values): an input's value, an
input left out, sent with the wrong dtype or shape, a batch of two, an unknown input or output, a
broken JSON body. `Case.nasty` says what and how bad; a case with nothing nasty must be served.
"""

import json
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from pipeline.triton_repo.interface import ENSEMBLE_INPUTS, TORCH_LLM_INPUTS
from tests.integration.fuzz_values import (
    EITHER,
    GRPC,
    HTTP,
    HTTP_STREAM,
    INVALID,
    NUMPY_DTYPES,
    Limits,
    Value,
    broken_body,
    nasty_ids,
    nasty_lengths,
    nasty_values,
    nasty_words_list,
    valid_value,
)

SPECS = {
    "ensemble": {s.name: s for s in ENSEMBLE_INPUTS},
    "tensorrt_llm_bls": {s.name: s for s in ENSEMBLE_INPUTS},
    "tensorrt_llm": {s.name: s for s in TORCH_LLM_INPUTS},
}
OUTPUTS = {
    "ensemble": ("text_output", "sequence_length"),
    "tensorrt_llm_bls": ("text_output", "sequence_length"),
    "tensorrt_llm": ("output_ids", "sequence_length", "text_output"),
}
# a wrong dtype for each dtype, with a value it can hold
WRONG_DTYPES = {
    "object": ("int32", 1),
    "int32": ("int64", 2**63 - 1),
    "float32": ("float64", 1e300),
}
WRONG_DTYPES |= {"uint64": ("int64", -(2**63)), "bool": ("int32", 1)}
SHAPE_FILL = {"object": "a", "bool": True}  # else 1
LLM_ID_INPUTS = ("input_ids", "input_lengths", "stop_words_list", "bad_words_list")
GRPC_ONLY = ("dtype", "shape", "batch", "batch_mismatch", "extra_input", "extra_output")


@dataclass(frozen=True)
class Case:
    model: str
    protocol: str
    inputs: dict  # input name -> Value
    nasty: dict  # what was made nasty (an input, "batch", "body", an output) -> EITHER/INVALID
    outputs: tuple[str, ...]  # the outputs asked for over gRPC
    body: bytes | None = None  # HTTP: a body sent instead of the inputs' JSON

    @property
    def must_refuse(self) -> bool:
        return INVALID in self.nasty.values()

    def arrays(self) -> dict[str, np.ndarray]:
        specs = SPECS[self.model]
        arrays = {}
        for name, value in self.inputs.items():
            own = NUMPY_DTYPES[specs[name].data_type] if name in specs else "int32"
            arrays[name] = _array(value, value.dtype or own)
        if self.nasty.get("batch") == EITHER:  # every input a batch of two
            arrays = {name: np.concatenate([a, a]) for name, a in arrays.items()}
        return arrays

    def json_body(self) -> bytes:
        if self.body is not None:
            return self.body
        # NaN and infinities go out as the NaN / Infinity literals curl users type
        return json.dumps({name: _json(v) for name, v in self.inputs.items()}).encode()

    def describe(self) -> str:
        """The exact request, to reproduce it by hand."""
        if self.protocol == GRPC:
            arrays = ", ".join(
                f"{n!r}: np.array({a.tolist()!r}, {a.dtype.name!r})"
                for n, a in self.arrays().items()
            )
            return f"gRPC {self.model} {{{arrays}}} outputs={list(self.outputs)}"
        path = "generate_stream" if self.protocol == HTTP_STREAM else "generate"
        return f"POST /v2/models/{self.model}/{path} {self.json_body()!r}"


def _json(value: Value):
    """Triton's generate takes a [2, N] word list flat, row after row (nested, only N=1)."""
    rows = value.data
    if value.layout == "words" and all(isinstance(r, list) for r in rows):
        return [t for row in rows for t in row]
    return rows


def _array(value: Value, dtype: str) -> np.ndarray:
    data = _encoded(value.data) if dtype == "object" else value.data
    shaped = {"scalar": [[data]], "list": [data], "words": [data], "raw": data}[value.layout]
    return np.array(shaped, dtype=dtype)


def _encoded(data):
    if isinstance(data, list):
        return [_encoded(d) for d in data]
    return data if isinstance(data, bytes) else str(data).encode()


def _base(draw, model: str, protocol: str, limits: Limits) -> dict:
    """A valid request: the required inputs and a random few of the optional ones."""
    specs = SPECS[model]
    names = [n for n, s in specs.items() if not s.optional and n != "input_lengths"]
    optional = [n for n, s in specs.items() if s.optional and n not in LLM_ID_INPUTS[:2]]
    if model == "tensorrt_llm":  # a prompt as ids (with or without their length) or as text
        optional.remove("text_input")
        names += draw(
            st.sampled_from((["input_ids", "input_lengths"], ["input_ids"], ["text_input"]))
        )
    names += draw(st.lists(st.sampled_from(optional), unique=True, max_size=len(optional)))
    inputs = {}
    for name in names:
        if name == "input_ids":
            token = st.integers(0, limits.vocab_size - 1)
            inputs[name] = Value(draw(st.lists(token, min_size=1, max_size=16)), "list")
        elif name == "input_lengths":
            inputs[name] = Value(len(inputs["input_ids"].data))
        elif (value := valid_value(name, protocol, limits, draw)) is not None:
            inputs[name] = value
    return inputs


def _perturbations(model: str, protocol: str, inputs: dict, limits: Limits) -> list[str]:
    specs = SPECS[model]
    specs = {n: s for n, s in specs.items() if s.data_type in NUMPY_DTYPES}
    values = [n for n, s in specs.items() if nasty_values(n, protocol, limits, s.data_type)]
    values += [n for n in LLM_ID_INPUTS[2:] if n in specs]
    values += [n for n in LLM_ID_INPUTS[:2] if n in specs and "input_ids" in inputs]
    required = [n for n, s in specs.items() if not s.optional and n in inputs]
    prompt = [n for n in ("input_ids", "text_input") if model == "tensorrt_llm" and n in inputs]
    kinds = [*(f"value:{n}" for n in values * 2), *(f"missing:{n}" for n in required + prompt)]
    kinds += ["both_prompts"] if prompt else []
    return kinds + (list(GRPC_ONLY) if protocol == GRPC else ["body"])


def _perturb(draw, kind: str, case: dict, limits: Limits) -> None:
    """Make one thing of the case (model, protocol, inputs, nasty, outputs) nasty, in place."""
    inputs, nasty, protocol = case["inputs"], case["nasty"], case["protocol"]
    what, _, name = kind.partition(":")
    ids = inputs.get("input_ids")
    if name in nasty or (name in LLM_ID_INPUTS[:2] and not (ids and isinstance(ids.data, list))):
        return  # one nasty thing an input, and lengths need ids
    if what == "value" and name == "input_ids":
        inputs[name], nasty[name] = nasty_ids(inputs[name].data, protocol, limits, draw)
    elif what == "value" and name == "input_lengths":
        data, nasty[name] = draw(
            st.sampled_from(nasty_lengths(len(inputs["input_ids"].data), protocol))
        )
        inputs[name] = Value(data)
    elif what == "value" and name.endswith("_words_list"):
        words = inputs.get(name, valid_value(name, protocol, limits, draw)).data
        inputs[name], nasty[name] = nasty_words_list(words, protocol, limits, draw)
    elif what == "value":
        data_type = SPECS[case["model"]][name].data_type
        data, nasty[name] = draw(st.sampled_from(nasty_values(name, protocol, limits, data_type)))
        inputs[name] = Value(data, "list" if isinstance(data, list) else "scalar")
    elif what == "missing":
        inputs.pop(name, None)
        nasty[name] = INVALID
    elif what == "both_prompts":  # input_ids and text_input together
        other = "text_input" if "input_ids" in inputs else "input_ids"
        inputs[other] = Value("Hi") if other == "text_input" else Value([1, 2], "list")
        nasty[other] = INVALID
    elif what in ("dtype", "shape", "batch_mismatch") and inputs:
        _break_tensor(draw, what, case)
    elif what == "batch":
        nasty["batch"] = EITHER
    elif what == "extra_input":
        inputs["bogus_input"], nasty["bogus_input"] = Value(1), INVALID
    elif what == "extra_output":
        case["outputs"] += ("bogus_output",)
        nasty["bogus_output"] = INVALID


def _break_tensor(draw, what: str, case: dict) -> None:
    inputs, specs = case["inputs"], SPECS[case["model"]]
    names = sorted(
        n
        for n in inputs
        if n in specs
        and n not in case["nasty"]
        and NUMPY_DTYPES.get(specs[n].data_type) in WRONG_DTYPES
    )
    if not names:
        return
    name = draw(st.sampled_from(names))
    own = NUMPY_DTYPES[specs[name].data_type]
    value = inputs[name]
    if what == "dtype":
        dtype, data = WRONG_DTYPES[own]
        inputs[name] = Value(data, "scalar", dtype)
        case["nasty"][name] = INVALID
    elif what == "shape":  # [1, 1, 2] fits no input's dims
        fill = SHAPE_FILL.get(own, 1)
        inputs[name] = Value([[[fill, fill]]], "raw")
        case["nasty"][name] = INVALID
    else:  # one input a batch of two, the others of one
        data = {"scalar": [[value.data]] * 2}.get(value.layout, [value.data] * 2)
        inputs[name] = Value(data, "raw", value.dtype)
        case["nasty"]["batch"] = INVALID


@st.composite
def cases(draw, model: str, limits: Limits) -> Case:
    protocol = draw(st.sampled_from((GRPC, GRPC, HTTP, HTTP_STREAM)))
    case = {"model": model, "protocol": protocol, "nasty": {}}
    case["inputs"] = _base(draw, model, protocol, limits)
    outputs = OUTPUTS[model]
    case["outputs"] = tuple(draw(st.lists(st.sampled_from(outputs), min_size=1, unique=True)))
    num_nasty = draw(st.sampled_from((0, 1, 1, 1, 1, 2, 2, 3)))
    kinds = _perturbations(model, protocol, case["inputs"], limits)
    chosen = draw(st.lists(st.sampled_from(kinds), min_size=num_nasty, max_size=num_nasty))
    for kind in chosen:
        if kind != "body":
            _perturb(draw, kind, case, limits)
    if "input_lengths" in case["inputs"] and "input_lengths" not in case["nasty"]:
        ids = case["inputs"].get("input_ids")  # the length of the ids as sent
        is_list = ids is not None and isinstance(ids.data, list)
        case["inputs"]["input_lengths"] = Value(len(ids.data) if is_list else 1)
    if "body" in chosen:  # last: it breaks the JSON of all the rest
        body = json.dumps({n: _json(v) for n, v in case["inputs"].items()}).encode()
        case["body"] = broken_body(body, draw)
        case["nasty"]["body"] = INVALID
    return Case(**case)
