"""A request's grammar (guided decoding, structured output): what kind and its text, no torch.

The kinds are the tensorrtllm backend's `guided_decoding_guide_type` values (TensorRT-LLM 1.2,
tensorrtllm_backend docs/guided_decoding.md): "json" (any JSON value; no text needed),
"json_schema" (a JSON schema), "regex" and "ebnf_grammar" (xgrammar's EBNF, rule `root`). The
OpenAI frontend turns its own forms into these (a choice list becomes an EBNF grammar).
"""

import json
from dataclasses import dataclass

GUIDE_TYPES = ("json", "json_schema", "regex", "ebnf_grammar")


@dataclass(frozen=True, slots=True)
class GuidedDecoding:
    type: str
    text: str = ""  # the schema (JSON text), regex or grammar; "" for "json"

    def __post_init__(self):
        if self.type not in GUIDE_TYPES:
            raise ValueError(
                f"SamplingParams: guide={self.type!r} is not a guided decoding type; use one of "
                f"{', '.join(GUIDE_TYPES)}"
            )
        if self.type != "json" and not self.text:
            raise ValueError(f"SamplingParams: guide={self.type!r} needs its text (it is empty)")
        if self.type == "json_schema":
            try:
                schema = json.loads(self.text)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"SamplingParams: guide='json_schema': the schema is not JSON ({exc})"
                ) from None
            if not isinstance(schema, dict | bool):
                raise ValueError(
                    f"SamplingParams: guide='json_schema': a schema is a JSON object, got "
                    f"{type(schema).__name__}"
                )


def json_schema_guide(schema: dict | bool) -> GuidedDecoding:
    """The guide of a schema given as a Python value (keys kept in order: they are the order
    the output's properties come in)."""
    return GuidedDecoding("json_schema", json.dumps(schema))


def choice_guide(choices: list[str]) -> GuidedDecoding:
    """Exactly one of these strings (vLLM's guided_choice), as an EBNF alternation."""
    if not choices:
        raise ValueError("SamplingParams: guide='choice' needs at least one choice")
    # json.dumps quotes and escapes a string as xgrammar's EBNF string literals are written
    return GuidedDecoding("ebnf_grammar", "root ::= " + " | ".join(json.dumps(c) for c in choices))
