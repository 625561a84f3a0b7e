"""A request's grammar from its OpenAI parameters: response_format (json_object, json_schema),
vLLM's guided_json / guided_regex / guided_choice / guided_grammar, or a forced tool call
(tool_calls.py). At most one of them; each refusal is a 400 naming the parameter."""

import json

from pipeline.openai_api.errors import bad_request
from pipeline.request.guided import GuidedDecoding, choice_guide, json_schema_guide

GUIDED_FIELDS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar")


def request_guide(request, tool_guide: GuidedDecoding | None = None) -> GuidedDecoding | None:
    """tool_guide: the forced tool call's grammar (tool_choice required or a named function)."""
    given = {name: getattr(request, name) for name in GUIDED_FIELDS}
    given = {name: value for name, value in given.items() if value is not None}
    response_format = _response_format(getattr(request, "response_format", None))
    if response_format is not None:
        given["response_format"] = response_format
    if tool_guide is not None:
        given["tool_choice"] = tool_guide
    if len(given) > 1:
        names = sorted(given)
        raise bad_request(
            f"{', '.join(names)}: each constrains the output; send one of them", names[-1]
        )
    if not given:
        return None
    ((name, value),) = given.items()
    try:
        if name == "guided_json":
            return json_schema_guide(_schema(value, name))
        if name == "guided_regex":
            return GuidedDecoding("regex", value)
        if name == "guided_choice":
            return choice_guide(value)
        if name == "guided_grammar":
            return GuidedDecoding("ebnf_grammar", value)
        return value  # already a guide
    except ValueError as exc:
        raise bad_request(f"{name}: {str(exc).removeprefix('SamplingParams: ')}", name) from None


def _response_format(value: dict | None) -> GuidedDecoding | None:
    """OpenAI's response_format: text (no grammar), json_object, json_schema."""
    if value is None:
        return None
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":  # an object (the "json" guide allows any JSON value)
        return json_schema_guide({"type": "object"})
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise bad_request(
                "response_format: json_schema needs {'name': ..., 'schema': {...}} under "
                "'json_schema'",
                "response_format.json_schema",
            )
        try:
            return json_schema_guide(_schema(spec["schema"], "response_format"))
        except ValueError as exc:
            raise bad_request(
                f"response_format: {str(exc).removeprefix('SamplingParams: ')}",
                "response_format.json_schema.schema",
            ) from None
    raise bad_request(
        f"response_format: type {kind!r} is not one of text, json_object, json_schema",
        "response_format.type",
    )


def _schema(value, name: str) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise bad_request(f"{name}: the schema is not JSON ({exc})", name) from None
    if not isinstance(value, dict):
        raise bad_request(f"{name}: a JSON schema is an object, got {value!r}", name)
    return value
