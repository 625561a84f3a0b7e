"""What the frontend knows of the deployed model: its tokenizer (prompts, chat template, text of
the streamed tokens) and the engine's limits, so a request the engine would refuse is refused
here with the engine's own words, before it travels.

Tokenizing and detokenizing as the served `tensorrt_llm` model does (llm_request.TextEncoder,
detokenizer.Detokenizer: the same files and flags), so a prompt sent here as token ids gets the
tokens and the text that the model's own text path gives.
"""

import math
from dataclasses import dataclass
from pathlib import Path

from pipeline.engine_json import EngineJson
from pipeline.errors import ArtifactError
from pipeline.openai_api.errors import APIError, bad_request
from pipeline.request.limits import RequestLimits
from pipeline.request.sampling_params import SamplingParams
from pipeline.specs.serve import OpenAISpec
from pipeline.triton_models.detokenizer import Detokenizer
from pipeline.triton_models.llm_request import TextEncoder

# serve.openai.max_concurrent_requests=0: engine requests in flight a slot of the engine's batch
AUTO_REQUESTS_PER_SLOT = 4


def read_limits(engine_dir: Path, enable_chunked_prefill: bool) -> RequestLimits:
    """The engine's request limits from its config.json (both backends write this layout).
    KV blocks: as many as max_batch_size sequences of max_seq_len need (the CPU engine's
    default); a request within max_seq_len never needs more, so the real cache decides."""
    engine = EngineJson.read(engine_dir)
    build = engine.build
    try:
        block_size = int(build["plugin_config"]["tokens_per_block"])
        max_seq_len = int(build["max_seq_len"])
        return RequestLimits(
            max_input_len=int(build["max_input_len"]),
            max_seq_len=max_seq_len,
            max_num_tokens=int(build["max_num_tokens"]),
            vocab_size=int(engine.pretrained["vocab_size"]),
            block_size=block_size,
            num_kv_blocks=int(build["max_batch_size"]) * math.ceil(max_seq_len / block_size),
            enable_chunked_prefill=enable_chunked_prefill,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(
            f"serve: cannot read the engine's limits from {engine.path} ({exc!r}); re-run "
            f"`make build`"
        ) from exc


def admitted_requests(spec: OpenAISpec, engine_dir: Path) -> int:
    """serve.openai.max_concurrent_requests, or (0) AUTO_REQUESTS_PER_SLOT x the engine's
    max_batch_size. Capped at the engine's batch, the frontend held the queue: a slot freed by
    a final response stayed empty until the next request crossed Triton to the engine (at 1,000
    streams over a 256-sequence engine, 0.78 of the gRPC path's tokens/s)."""
    if spec.max_concurrent_requests:
        return spec.max_concurrent_requests
    return AUTO_REQUESTS_PER_SLOT * int(EngineJson.read(engine_dir).build["max_batch_size"])


# the OpenAI parameters whose token ids RequestLimits checks, as its messages name them
_ID_PARAMS = {"logit_bias": "logit_bias", "stop_token_ids": "stop token ids"}


@dataclass(frozen=True, slots=True)
class Prompt:
    token_ids: list[int]
    text: str | None  # what `echo` sends back; None: sent as token ids (decoded if echoed)


class ServedModel:
    def __init__(
        self,
        name: str,
        tokenizer_dir: Path,
        limits: RequestLimits,
        add_special_tokens: bool,
        skip_special_tokens: bool,
        backend: str,
    ):
        """backend=torch: the engine ends on its own end tokens (generation_config's, all of
        them) and its penalties can skip the prompt (OpenAI's rule); the tensorrtllm backend
        has no default end token, so every request names the tokenizer's eos, and its
        penalties count the prompt's tokens too."""
        self.name, self.limits, self.tokenizer_dir = name, limits, tokenizer_dir
        sends_end_id = backend != "torch"
        self.can_skip_prompt_in_penalties = backend == "torch"
        # the torch model's outputs: top log probabilities, the prompt's (section 9.3)
        self.has_top_logprobs = backend == "torch"
        self.detokenizer = Detokenizer(tokenizer_dir, skip_special_tokens)
        self.tokenizer = self.detokenizer.tokenizer
        self._prompt_encoder = TextEncoder(self.tokenizer, add_special_tokens)
        self.end_id = self._prompt_encoder.end_id if sends_end_id else None
        # a chat template writes the special tokens itself
        self._chat_encoder = TextEncoder(self.tokenizer, add_special_tokens=False)
        self.chat_template = getattr(self.tokenizer, "chat_template", None)
        self.has_chat_template = bool(self.chat_template)

    def encode_prompt(self, text: str, param: str = "prompt") -> Prompt:
        return Prompt(self._encode(self._prompt_encoder, text, param), text)

    def token_prompt(self, token_ids: list[int], param: str = "prompt") -> Prompt:
        if not token_ids:
            raise bad_request(f"{param}: an empty token list; send at least one token", param)
        return Prompt(list(token_ids), None)

    def check_token_ids(self, token_ids: list[int], param: str) -> None:
        bad = [t for t in token_ids if not 0 <= t < self.limits.vocab_size]
        if bad:
            raise bad_request(
                f"{param}: token ids {bad[:5]} are outside the vocabulary "
                f"[0, {self.limits.vocab_size})",
                param,
            )

    def echo(self, prompt: Prompt) -> str:
        return self.detokenizer.decode(prompt.token_ids) if prompt.text is None else prompt.text

    def chat_prompt(self, messages: list[dict], tools: list[dict] | None = None) -> Prompt:
        if not self.has_chat_template:
            raise bad_request(
                f"model {self.name!r} has no chat template in its tokenizer; use "
                f"/v1/completions with a prompt",
                "messages",
            )
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=True
            )
        except Exception as exc:  # the template's own checks (raise_exception in jinja)
            raise bad_request(
                f"messages: the chat template refused them: {exc}", "messages"
            ) from None
        return Prompt(self._encode(self._chat_encoder, text, "messages"), text)

    @staticmethod
    def _encode(encoder: TextEncoder, text: str, param: str) -> list[int]:
        try:
            return encoder.prompt(text)
        except ValueError:
            raise bad_request(
                f"{param}: tokenizes to no tokens; send a non-empty prompt", param
            ) from None

    def stop_sequences(self, stops: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
        """The stop strings as the engine's stop word token sequences (as preprocessing makes
        stop_words: without special tokens)."""
        return self._chat_encoder.words(list(stops))

    def check(self, prompt: Prompt, params: SamplingParams, param: str) -> None:
        """The engine's RequestLimits on this request: 400 with its message."""
        try:
            self.limits.check(prompt.token_ids, params)
        except ValueError as exc:
            num_prompt = len(prompt.token_ids)
            too_long = num_prompt > self.limits.max_input_len
            over_seq = num_prompt + params.max_tokens > self.limits.max_seq_len
            if not (too_long or over_seq):
                # the token ids it names: the prompt's, or those of the parameter it names
                named = [p for p in _ID_PARAMS if f"request: {_ID_PARAMS[p]} " in str(exc)]
                param = named[0] if named else param
            raise APIError(
                400,
                str(exc),
                "max_tokens" if over_seq and not too_long else param,
                "context_length_exceeded" if too_long or over_seq else None,
            ) from None

    def room(self, prompt: Prompt) -> int:
        """Tokens the engine can still generate after this prompt."""
        return self.limits.max_seq_len - len(prompt.token_ids)
