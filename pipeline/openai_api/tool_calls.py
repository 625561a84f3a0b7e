"""Tool calls: the tools a chat request offers, the grammar that forces a call, and the calls
read back out of the generated text.

Two call formats, chosen by what the model's chat template renders (as vLLM's tool parsers):
- "hermes": `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number of them,
  text around them being the message's content (Hermes, Qwen2.5, SmolLM3 templates);
- "llama3_json": the whole answer is `{"name": ..., "parameters": {...}}` (Llama 3.1+
  templates, which name the arguments "parameters").

tool_choice "required" and a named function are forced by a JSON schema of the call object
built from the tools' parameter schemas (required: an anyOf of every tool's); "auto" leaves the
model free and reads calls out of its text; "none" offers the tools to the template only.
A template that renders no tools (it never mentions them) gets them in a system message.
"""

import json
import re
import uuid
from dataclasses import dataclass

from pipeline.openai_api.errors import bad_request
from pipeline.request.guided import GuidedDecoding, json_schema_guide

HERMES, LLAMA3_JSON = "hermes", "llama3_json"
_HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_ANY_ARGUMENTS: dict = {"type": "object"}


@dataclass(frozen=True, slots=True)
class ToolPlan:
    tools: list[dict]  # OpenAI's tool objects, as the chat template takes them
    mode: str  # "none", "auto", "required" or "named"
    call_format: str  # HERMES or LLAMA3_JSON
    guide: GuidedDecoding | None  # the forced call's grammar (required, named)

    @property
    def arguments_key(self) -> str:
        return "parameters" if self.call_format == LLAMA3_JSON else "arguments"

    @property
    def reads_calls(self) -> bool:
        return self.mode != "none"


def call_format(chat_template) -> str:
    """The format the model's chat template teaches it (hermes when it says nothing)."""
    text = json.dumps(chat_template) if isinstance(chat_template, dict | list) else chat_template
    text = text or ""
    if "<tool_call>" in text:
        return HERMES
    if '"parameters"' in text or "ipython" in text:
        return LLAMA3_JSON
    return HERMES


def renders_tools(chat_template) -> bool:
    text = json.dumps(chat_template) if isinstance(chat_template, dict | list) else chat_template
    return "tools" in (text or "")


def tool_plan(request, chat_template) -> ToolPlan | None:
    """None when the request offers no tools."""
    choice = request.tool_choice
    if not request.tools:
        if choice not in (None, "none"):
            raise bad_request("tool_choice: only allowed when tools are given", "tool_choice")
        return None
    tools = [tool.model_dump(exclude_none=True) for tool in request.tools]
    names = [tool["function"]["name"] for tool in tools]
    fmt = call_format(chat_template)
    key = "parameters" if fmt == LLAMA3_JSON else "arguments"
    if choice is None or choice in ("auto", "none"):
        return ToolPlan(tools, choice or "auto", fmt, None)
    if choice == "required":
        calls = [_call_schema(tool["function"], key) for tool in tools]
        schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
        return ToolPlan(tools, "required", fmt, json_schema_guide(schema))
    name = _named(choice)
    if name not in names:
        raise bad_request(
            f"tool_choice: function {name!r} is not among the tools ({', '.join(names)})",
            "tool_choice",
        )
    function = tools[names.index(name)]["function"]
    return ToolPlan(tools, "named", fmt, json_schema_guide(_call_schema(function, key)))


def _named(choice) -> str:
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        if isinstance(name, str):
            return name
    raise bad_request(
        f"tool_choice: {choice!r} is not none, auto, required or "
        f'{{"type": "function", "function": {{"name": ...}}}}',
        "tool_choice",
    )


def _call_schema(function: dict, key: str) -> dict:
    return {
        "type": "object",
        "properties": {
            "name": {"const": function["name"]},
            key: function.get("parameters") or _ANY_ARGUMENTS,
        },
        "required": ["name", key],
        "additionalProperties": False,
    }


def template_messages(messages) -> list[dict]:
    """The request's messages as chat templates take them: an assistant's tool calls with
    their arguments as objects (templates write them with tojson), tool results with their
    call's id."""
    out = []
    for m in messages:
        message = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
        if m.name is not None:
            message["name"] = m.name
        if m.tool_call_id is not None:
            message["tool_call_id"] = m.tool_call_id
        if m.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.function.name,
                        "arguments": _arguments_object(call.function.arguments),
                    },
                }
                for call in m.tool_calls
            ]
        out.append(message)
    return out


def _arguments_object(arguments: str):
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def tools_system_message(plan: ToolPlan) -> dict:
    """The tools in a system message, for a template that renders none (Hermes' wording)."""
    key = plan.arguments_key
    example = f'{{"name": <function-name>, "{key}": <args-json-object>}}'
    if plan.call_format == HERMES:
        example = f"<tool_call>\n{example}\n</tool_call>"
    tools = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in plan.tools)
    return {
        "role": "system",
        "content": f"You may call one or more functions to assist with the user query. The "
        f"functions you can call:\n<tools>\n{tools}\n</tools>\nFor each function call, answer "
        f"with a JSON object of the function's name and arguments:\n{example}",
    }


def parse_calls(text: str, plan: ToolPlan) -> tuple[str, list[dict]]:
    """(the content left, the calls found) in a whole answer; no call found: (text, [])."""
    names = {tool["function"]["name"] for tool in plan.tools}
    if plan.guide is not None or plan.call_format == LLAMA3_JSON:
        call = _call(text.strip(), names, plan.arguments_key)
        return ("", [call]) if call is not None else (text, [])
    calls, content = [], text
    for match in _HERMES_CALL.finditer(text):
        call = _call(match[1], names, plan.arguments_key)
        if call is None:
            return text, []
        calls.append(call)
        content = content.replace(match[0], "", 1)
    return (content.strip(), calls) if calls else (text, [])


def _call(body: str, names: set[str], key: str) -> dict | None:
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or value.get("name") not in names:
        return None
    arguments = value.get(key, value.get("arguments", value.get("parameters", {})))
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": value["name"], "arguments": json.dumps(arguments, ensure_ascii=False)},
    }
