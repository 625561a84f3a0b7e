"""The request bodies of /v1/completions and /v1/chat/completions, as pydantic models.

Strict, as OpenAI is: "5" is not an integer, an unknown key is refused (its name in the error),
and a parameter the engine cannot honour is a clear 400 (`refusals`), never silently ignored.
Value ranges are the engine's own (SamplingParams, RequestLimits), checked in `choices`.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from pipeline.openai_api.errors import APIError, bad_request, unsupported

# stop strings a request may give (OpenAI allows 4, vLLM any number): each is matched against
# the text as it streams and sent to the engine as a stop word, so their number stays bounded
MAX_STOP_SEQUENCES = 64
# the most likeliest tokens a position's log probabilities may list (OpenAI's chat limit; its
# legacy completions allow 5, vLLM's default 20 for both)
MAX_TOP_LOGPROBS = 20
_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    def refusals(self) -> list[APIError]:
        """Valid types, values this server refuses (none unless a body has some)."""
        return []


class StreamOptions(_Strict):
    include_usage: bool = False
    # vLLM's extension: every chunk carries the usage so far (how a benchmark counts tokens)
    continuous_usage_stats: bool = False


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class FunctionCall(_Strict):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionDefinition(_Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema of the arguments
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDefinition


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None  # an assistant's earlier calls
    tool_call_id: str | None = None  # a tool message answers this call

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class _GenerationRequest(_Strict):
    model: str
    max_tokens: int | None = None
    temperature: float = 1.0  # OpenAI's default: sampled; 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # an extension (vLLM's, TensorRT-LLM's): 0 = no top-k filter
    min_p: float = 0.0  # vLLM's extension: drop tokens below min_p x the likeliest's probability
    ignore_eos: bool = False  # vLLM's extension: run to max_tokens (benchmarks' fixed lengths)
    repetition_penalty: float = 1.0  # vLLM's extension (TensorRT-LLM's): > 1 discourages repeats
    min_tokens: int = 0  # vLLM's extension: no end token before this many
    priority: int = 0  # vLLM's extension: a queued request with a lower one is admitted first
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None  # vLLM's extension: kept in the output, as vLLM does
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None  # accepted and ignored, as are the bookkeeping keys below
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    # vLLM's guided decoding extensions (at most one; chat's response_format is the other way)
    guided_json: dict[str, Any] | str | None = None  # a JSON schema
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None  # EBNF (xgrammar's dialect, rule `root`)

    def stop_strings(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    def logit_biases(self) -> tuple[tuple[int, float], ...]:
        return tuple((int(token), bias) for token, bias in (self.logit_bias or {}).items())

    def refusals(self) -> list[APIError]:
        """The parameters set to something the engine cannot do (none are ignored)."""
        refused = []
        stops = self.stop_strings()
        if len(stops) > MAX_STOP_SEQUENCES:
            refused.append(
                bad_request(
                    f"stop: {len(stops)} sequences given, at most {MAX_STOP_SEQUENCES} are allowed",
                    "stop",
                )
            )
        if any(not s for s in stops):
            refused.append(bad_request("stop: an empty string never matches; remove it", "stop"))
        for key in self.logit_bias or {}:
            if not key.isdecimal():
                refused.append(
                    bad_request(
                        f"logit_bias: the key {key!r} is not a token id; send token ids as "
                        f'strings, e.g. {{"50256": -100}}',
                        "logit_bias",
                    )
                )
                break
        if self.stream_options is not None and not self.stream:
            refused.append(bad_request("stream_options: only allowed with stream=true"))
        return refused


class CompletionRequest(_GenerationRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = None
    best_of: int | None = None
    suffix: str | None = None

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs is not None

    @property
    def num_top_logprobs(self) -> int:
        return self.logprobs or 0

    @property
    def wants_prompt_logprobs(self) -> bool:
        """echo with logprobs: the prompt's tokens come back with theirs (the first has none)."""
        return self.echo and self.logprobs is not None

    def refusals(self) -> list[APIError]:
        refused = super().refusals()
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            refused.append(
                bad_request(
                    f"logprobs={self.logprobs} must be in [0, {MAX_TOP_LOGPROBS}]", "logprobs"
                )
            )
        if self.best_of not in (None, self.n):
            refused.append(unsupported("best_of", "the engine does not rank choices; use n"))
        if self.suffix:
            refused.append(unsupported("suffix", "the engine does not insert text"))
        return refused


class ChatCompletionRequest(_GenerationRequest):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None  # none, auto, required, or a named function
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None  # text, json_object or json_schema
    # OpenAI features this server does not have: refused when set (clients often send null)
    functions: list[Any] | None = None
    function_call: Any = None
    modalities: list[str] | None = None
    audio: Any = None
    prediction: Any = None
    reasoning_effort: str | None = None
    web_search_options: Any = None

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs

    @property
    def num_top_logprobs(self) -> int:
        return self.top_logprobs or 0

    @property
    def wants_prompt_logprobs(self) -> bool:
        return False

    def refusals(self) -> list[APIError]:
        refused = super().refusals()
        if self.top_logprobs is not None and not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            refused.append(
                bad_request(
                    f"top_logprobs={self.top_logprobs} must be in [0, {MAX_TOP_LOGPROBS}]",
                    "top_logprobs",
                )
            )
        elif self.top_logprobs is not None and not self.logprobs:
            refused.append(bad_request("top_logprobs: needs logprobs=true", "top_logprobs"))
        for name in ("functions", "function_call"):
            if getattr(self, name) is not None:
                refused.append(unsupported(name, "the deprecated function calling; use tools"))
        for name in ("audio", "prediction", "reasoning_effort", "web_search_options"):
            if getattr(self, name) is not None:
                refused.append(unsupported(name, "a text-only model without these features"))
        if self.modalities not in (None, ["text"]):
            refused.append(unsupported("modalities", "text output only"))
        if not self.messages:
            refused.append(bad_request("messages: at least one message is required", "messages"))
        if self.max_tokens is not None and self.max_completion_tokens not in (
            None,
            self.max_tokens,
        ):
            refused.append(
                bad_request(
                    f"max_tokens={self.max_tokens} and max_completion_tokens="
                    f"{self.max_completion_tokens} disagree; send one of them",
                    "max_completion_tokens",
                )
            )
        return refused

    def requested_max_tokens(self) -> int | None:
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens


def parse(model: type[_Strict], body: bytes) -> _Strict:
    """The body as `model`, or a 400 naming the first bad field, its value and what it takes."""
    try:
        request = model.model_validate_json(body)
    except ValidationError as exc:
        raise _as_api_error(exc) from None
    refused = request.refusals()
    if refused:
        raise refused[0]
    return request


def _as_api_error(exc: ValidationError) -> APIError:
    error = exc.errors(include_url=False)[0]
    if error["type"] == "json_invalid":
        return bad_request(
            f"the request body is not valid JSON ({error['msg']}); send a JSON object",
            code="invalid_json",
        )
    param = _param(error["loc"])
    if error["type"] == "extra_forbidden":
        return bad_request(f"Unrecognized request argument supplied: {param}", param)
    if error["type"] == "missing":
        return bad_request(f"{param}: a required parameter is missing", param)
    where = f"{param}: " if param else "the request body: "
    return bad_request(f"{where}{error['msg']} (got {error.get('input')!r})", param)


def _param(loc: tuple) -> str | None:
    """The field path of a pydantic error location, without its union-member tags."""
    parts = []
    for part in loc:
        if isinstance(part, int):
            parts.append(str(part))
        elif isinstance(part, str) and part.isidentifier() and part not in _TYPE_TAGS:
            parts.append(part)
        else:
            break
    return ".".join(parts) or None
