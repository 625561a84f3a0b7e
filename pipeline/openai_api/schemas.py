"""The bodies of the endpoints besides generation's requests (protocol.py): the response bodies,
as OpenAI's and vLLM's clients read them, and the /tokenize and /detokenize requests (vLLM's
shapes). /openapi.json is generated from these models and protocol's (openapi.py)."""

from typing import Literal

from pydantic import BaseModel

from pipeline.openai_api.protocol import ChatMessage, _Strict


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    error: ErrorBody


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: Literal["stop", "length"] | None
    logprobs: dict | None = None


class Completion(BaseModel):
    """The whole answer; streamed, each server-sent event is one of these with the new text."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop", "length"] | None
    logprobs: dict | None = None


class ChatCompletion(BaseModel):
    """The whole answer; streamed, each event is a chat.completion.chunk whose choices carry a
    `delta` in place of `message`."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str  # what clients send as `model`
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    # vLLM's fields: the served model's local Hugging Face (tokenizer) directory, which a tool
    # that needs the tokenizer can load, and the engine's context length
    root: str
    max_model_len: int
    parent: str | None = None  # vLLM's: a LoRA adapter's base model id (left out for the base)


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenizeCompletionRequest(_Strict):
    model: str | None = None  # the served id when given (vLLM's: optional)
    prompt: str


class TokenizeChatRequest(_Strict):
    model: str | None = None
    messages: list[ChatMessage]  # through the chat template, as /v1/chat/completions sends them


class TokenizeResponse(BaseModel):
    tokens: list[int]  # the ids the engine gets for this prompt
    count: int
    max_model_len: int


class DetokenizeRequest(_Strict):
    model: str | None = None
    tokens: list[int]


class DetokenizeResponse(BaseModel):
    prompt: str


class Version(BaseModel):
    version: str  # the llm-pipeline package's


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
