"""The response bodies of both endpoints, whole and as server-sent-event chunks."""

import time
import uuid
from dataclasses import dataclass, field

from pipeline.openai_api.generation import Piece
from pipeline.openai_api.sse_chunks import ChunkEncoder, sse

DONE = b"data: [DONE]\n\n"


def usage(num_prompt_tokens: int, num_completion_tokens: int, num_cached_tokens: int = 0) -> dict:
    return {
        "prompt_tokens": num_prompt_tokens,
        "completion_tokens": num_completion_tokens,
        "total_tokens": num_prompt_tokens + num_completion_tokens,
        "prompt_tokens_details": {"cached_tokens": num_cached_tokens},
    }


@dataclass(slots=True)
class Answer:
    """One request's choices as they fill up (text, tokens, finish_reason each)."""

    num_choices: int
    texts: list[str] = field(default_factory=list)
    num_tokens: list[int] = field(default_factory=list)
    finish_reasons: list[str | None] = field(default_factory=list)
    token_ids: list[list[int]] = field(default_factory=list)  # with log probabilities only
    logprobs: list[list[float]] = field(default_factory=list)
    cached_tokens: list[int] = field(default_factory=list)  # each choice's prompt's, when known
    top_logprobs: list[list] = field(default_factory=list)  # each token's likeliest, when asked
    prompts: list = field(default_factory=list)  # each choice's prompt scores (echo), or None
    tool_calls: list[tuple[dict, ...]] = field(default_factory=list)

    def __post_init__(self):
        self.texts = [""] * self.num_choices
        self.num_tokens = [0] * self.num_choices
        self.finish_reasons = [None] * self.num_choices
        self.token_ids = [[] for _ in range(self.num_choices)]
        self.logprobs = [[] for _ in range(self.num_choices)]
        self.cached_tokens = [0] * self.num_choices
        self.top_logprobs = [[] for _ in range(self.num_choices)]
        self.prompts = [None] * self.num_choices
        self.tool_calls = [() for _ in range(self.num_choices)]

    def add(self, index: int, piece: Piece) -> None:
        self.texts[index] += piece.text
        self.num_tokens[index] = piece.num_tokens
        self.finish_reasons[index] = piece.finish_reason or self.finish_reasons[index]
        self.tool_calls[index] += piece.tool_calls
        if piece.logprobs is not None:
            self.token_ids[index] += piece.token_ids
            self.logprobs[index] += piece.logprobs
        self.cached_tokens[index] = piece.num_cached_tokens or self.cached_tokens[index]
        if piece.top_logprobs is not None:
            self.top_logprobs[index] += piece.top_logprobs
        if piece.prompt is not None:
            self.prompts[index] = piece.prompt

    def num_cached_tokens(self, prompts: list) -> int:
        """Prompt tokens the prefix cache held, each prompt once (as usage counts prompts):
        the most any of its choices (prompts[i]: choice i's) reported."""
        most: dict[int, int] = {}
        for prompt, cached in zip(prompts, self.cached_tokens, strict=True):
            most[id(prompt)] = max(most.get(id(prompt), 0), cached)
        return sum(most.values())

    @property
    def num_completion_tokens(self) -> int:
        return sum(self.num_tokens)


class Shape:
    """The ids, object names and choice layout of one endpoint's responses."""

    def __init__(self, is_chat: bool, model: str):
        self.is_chat, self.model = is_chat, model
        self.id = f"{'chatcmpl' if is_chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self._chunks = ChunkEncoder(self._head(is_chunk=True))

    def _head(self, is_chunk: bool) -> dict:
        if self.is_chat:
            name = "chat.completion.chunk" if is_chunk else "chat.completion"
        else:
            name = "text_completion"
        return {"id": self.id, "object": name, "created": self.created, "model": self.model}

    def whole(
        self, answer: Answer, num_prompt_tokens: int, logprobs=None, num_cached_tokens: int = 0
    ) -> dict:
        """logprobs: a LogprobsWriter when the request asked for them."""
        choices = []
        for i, (text, reason) in enumerate(zip(answer.texts, answer.finish_reasons, strict=True)):
            if self.is_chat:
                content = {"message": {"role": "assistant", "content": text}}
                if answer.tool_calls[i]:  # OpenAI's: no content beside calls is null
                    message = {"content": text or None, "tool_calls": list(answer.tool_calls[i])}
                    content["message"].update(message)
            else:
                content = {"text": text}
            part = None
            if logprobs is not None:
                part = logprobs.choice_part(i, answer)
            choices.append({"index": i, **content, "logprobs": part, "finish_reason": reason})
        return {
            **self._head(is_chunk=False),
            "choices": choices,
            "usage": usage(num_prompt_tokens, answer.num_completion_tokens, num_cached_tokens),
        }

    def chunk(
        self,
        index: int,
        text: str,
        finish_reason: str | None,
        with_usage: bool,
        role: bool = False,
        usage_so_far: dict | None = None,
        logprobs: dict | None = None,
    ) -> bytes:
        """One choice's piece; role: the chat stream's first chunk of a choice says who speaks;
        usage_so_far: sent instead of null (continuous_usage_stats)."""
        has_usage = with_usage or usage_so_far is not None
        delta = None  # a completion's text
        if self.is_chat:
            delta = "role" if role else "content"
            if finish_reason is not None and not text:
                delta = ""
        if logprobs is None:  # the usual chunk, joined from pre-encoded pieces
            fast = self._chunks.choice(index, text, finish_reason, usage_so_far, has_usage, delta)
            if fast is not None:
                return fast
        if self.is_chat:
            content = {"role": "assistant", "content": text} if role else {"content": text}
            choice = {"index": index, "delta": content if delta else {}}
        else:
            choice = {"index": index, "text": text}
        body = {
            **self._head(is_chunk=True),
            "choices": [{**choice, "logprobs": logprobs, "finish_reason": finish_reason}],
        }
        if has_usage:
            body["usage"] = usage_so_far  # OpenAI's shape: null on every chunk but the last
        return sse(body)

    def tool_calls_chunk(
        self, index: int, calls: tuple[dict, ...], with_usage: bool, usage_so_far: dict | None
    ) -> bytes:
        """A chat choice's tool calls, each whole in one delta (its index among the calls)."""
        delta = {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]}
        body = {
            **self._head(is_chunk=True),
            "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": None}],
        }
        if with_usage or usage_so_far is not None:
            body["usage"] = usage_so_far
        return sse(body)

    def usage_chunk(
        self, num_prompt_tokens: int, num_completion_tokens: int, num_cached_tokens: int = 0
    ) -> bytes:
        return sse(
            {
                **self._head(is_chunk=True),
                "choices": [],
                "usage": usage(num_prompt_tokens, num_completion_tokens, num_cached_tokens),
            }
        )
