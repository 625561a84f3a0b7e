"""A validated request -> the engine requests it makes: one per prompt and choice (n).

Ranges are the engine's (SamplingParams: temperature, top_p, top_k, seed, max_tokens; the
engine's RequestLimits: prompt length, context, token ids), so a value is refused here in the
words the engine would use, with the OpenAI parameter named.

n > 1 sends n requests (seed, when given, + the choice's index: reproducible, not all the same).
With greedy decoding they are n equal choices, as vLLM answers.
"""

import re
from dataclasses import dataclass

from pipeline.openai_api.errors import bad_request, unsupported
from pipeline.openai_api.served_model import Prompt, ServedModel
from pipeline.request.guided import GuidedDecoding
from pipeline.request.sampling_params import SamplingParams
from pipeline.specs.serve import OpenAISpec

# OpenAI's default for /v1/completions; chat defaults to what the context has room for
COMPLETION_MAX_TOKENS = 16
_PROBLEM_NAME = re.compile(r"SamplingParams: (\w+)=")
NO_END_ID = -1  # TensorRT-LLM's end_id that no token matches


@dataclass(frozen=True, slots=True)
class Choice:
    index: int
    prompt: Prompt
    params: SamplingParams
    # max_tokens=0 with echo (OpenAI's legacy completions): the prompt alone, scored by one
    # engine step whose token is dropped (as vLLM answers it)
    is_prompt_only: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    choices: list[Choice]
    stops: tuple[str, ...]
    num_prompt_tokens: int  # each prompt once, whatever n is (OpenAI's usage)


def plan(
    request,
    prompts: list[Prompt],
    max_tokens: int | None,
    model: ServedModel,
    settings: OpenAISpec,
    prompt_param: str,
    guide: GuidedDecoding | None = None,
) -> Plan:
    """max_tokens: as asked (None: /v1/completions' 16, chat's room left in the context)."""
    if not 1 <= request.n <= settings.max_n:
        raise bad_request(
            f"n={request.n} must be in [1, {settings.max_n}] (serve.openai.max_n sets the most)",
            "n",
        )
    stops = request.stop_strings()
    stop_sequences = model.stop_sequences(stops)
    check_logprobs(request, model)
    # max_tokens=0 asks for the echoed prompt alone (without echo it asks for nothing: 400)
    is_prompt_only = max_tokens == 0 and getattr(request, "echo", False)
    if is_prompt_only:
        max_tokens = 1
    choices = []
    for prompt in prompts:
        wanted = max_tokens
        if wanted is None:
            room = max(1, model.room(prompt))
            wanted = COMPLETION_MAX_TOKENS if prompt_param == "prompt" else room
            if settings.max_tokens_limit:
                wanted = min(wanted, settings.max_tokens_limit)
        elif settings.max_tokens_limit and wanted > settings.max_tokens_limit:
            raise bad_request(
                f"max_tokens={wanted} is above this server's limit of "
                f"{settings.max_tokens_limit} (serve.openai.max_tokens_limit)",
                "max_tokens",
            )
        for i in range(request.n):
            seed = None if request.seed is None else request.seed + i
            end_id = NO_END_ID if request.ignore_eos else model.end_id
            # OpenAI's presence/frequency penalties count the generated tokens only
            skip = len(prompt.token_ids) if model.can_skip_prompt_in_penalties else 0
            params = _sampling_params(request, wanted, seed, end_id, stop_sequences, skip, guide)
            model.check(prompt, params, prompt_param)
            choices.append(Choice(len(choices), prompt, params, is_prompt_only))
    num_prompt_tokens = sum(len(p.token_ids) for p in prompts)
    return Plan(choices, stops, num_prompt_tokens)


def check_logprobs(request, model: ServedModel) -> None:
    """Top alternatives and the prompt's log probabilities come from the torch model's own
    outputs; the tensorrtllm backend returns the sampled tokens' only."""
    if model.has_top_logprobs or not request.wants_logprobs:
        return
    param = "top_logprobs" if hasattr(request, "top_logprobs") else "logprobs"
    if request.num_top_logprobs:
        raise unsupported(param, "backend=trtllm returns the sampled token's only; send 0")
    if request.wants_prompt_logprobs:
        raise unsupported("echo", "with logprobs: backend=trtllm returns no prompt's")


def _sampling_params(
    request,
    max_tokens: int,
    seed: int | None,
    end_id: int | None,
    stop_sequences,
    prompt_ignore_length: int,
    guide: GuidedDecoding | None = None,
) -> SamplingParams:
    try:
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=request.temperature,
            top_k=request.top_k,
            top_p=request.top_p,
            min_p=request.min_p,
            seed=seed,
            end_id=end_id,
            stop_sequences=stop_sequences,
            stop_token_ids=tuple(request.stop_token_ids or ()),
            logit_bias=request.logit_biases(),
            presence_penalty=request.presence_penalty,
            frequency_penalty=request.frequency_penalty,
            repetition_penalty=request.repetition_penalty,
            prompt_ignore_length=prompt_ignore_length,
            min_tokens=request.min_tokens,
            logprobs=request.num_top_logprobs if request.wants_logprobs else None,
            prompt_logprobs=request.num_top_logprobs if request.wants_prompt_logprobs else None,
            guide=guide,
        )
    except ValueError as exc:
        match = _PROBLEM_NAME.search(str(exc))
        raise bad_request(str(exc), match[1] if match else None) from None
