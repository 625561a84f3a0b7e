"""Per-request generation knobs (names follow the tensorrtllm backend's inputs, and OpenAI's
where the two agree: presence_penalty, frequency_penalty, min_tokens, logprobs; vLLM's
prompt_logprobs).

Every value is checked here, whoever builds the request (the Triton models, a frontend, a
script): a NaN temperature or a seed past 64 bits must fail the request that carries it, never
reach the sampler, where it would fail the whole batch. Token ids are checked against the
vocabulary by RequestLimits, which knows it.
"""

import math
from dataclasses import dataclass, field

from pipeline.lora.adapters import NAME as LORA_NAME
from pipeline.request.guided import GuidedDecoding
from pipeline.triton_models.input_checks import ALLOWED, LOGIT_BIAS

MAX_INT32 = 2**31 - 1
MAX_UINT64 = 2**64 - 1
# top alternatives a position may ask for (OpenAI's chat top_logprobs limit; vLLM's default)
MAX_LOGPROBS = 20
# below it a draw is the argmax in float32 anyway, and near 1e-38 logits / temperature overflow
# to inf and softmax to NaN (vLLM's _SAMPLING_EPS)
GREEDY_BELOW_TEMPERATURE = 1e-5
# the knobs the sampler scales logits by, in the Triton inputs' ranges (float32-safe)
BOUNDED_FLOATS = ("temperature", "repetition_penalty", "presence_penalty", "frequency_penalty")


def _token_sequences(name: str, value) -> tuple[tuple[int, ...], ...]:
    seqs = tuple(tuple(int(t) for t in seq) for seq in value)
    if any(not seq for seq in seqs):
        raise ValueError(f"SamplingParams.{name}: empty token sequence in {value!r}")
    return seqs


def _biases(value) -> tuple[tuple[int, float], ...]:
    """(token id, bias) pairs, sorted by token; a token given twice is an error."""
    pairs = tuple(sorted((int(token), float(bias)) for token, bias in value))
    tokens = [token for token, _ in pairs]
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"SamplingParams.logit_bias: a token id is given twice in {value!r}")
    return pairs


def _problems(p: "SamplingParams") -> list[str]:
    """Every out-of-range knob, each named with its value and the allowed range."""
    problems = []
    if not 1 <= p.max_tokens <= MAX_INT32:
        problems.append(f"max_tokens={p.max_tokens} must be in [1, {MAX_INT32}]")
    for name in BOUNDED_FLOATS:
        value, allowed = getattr(p, name), ALLOWED[name]
        if not (math.isfinite(value) and allowed.allows(value)):
            problems.append(f"{name}={value} must be in {allowed.describe()}")
    if not 0 <= p.top_k <= MAX_INT32:
        problems.append(f"top_k={p.top_k} must be in [0, {MAX_INT32}] (0 disables it)")
    if not (math.isfinite(p.top_p) and 0.0 < p.top_p <= 1.0):
        problems.append(f"top_p={p.top_p} must be in (0, 1]")
    if not (math.isfinite(p.min_p) and ALLOWED["min_p"].allows(p.min_p)):
        problems.append(f"min_p={p.min_p} must be in {ALLOWED['min_p'].describe()}")
    for token, bias in p.logit_bias:
        if not (math.isfinite(bias) and LOGIT_BIAS.allows(bias)):
            problems.append(f"logit_bias={bias} (token {token}) must be in {LOGIT_BIAS.describe()}")
    if p.seed is not None and not 0 <= p.seed <= MAX_UINT64:
        problems.append(f"seed={p.seed} must be in [0, 2**64 - 1]")
    for name in ("end_id", "pad_id"):
        value = getattr(p, name)
        if value is not None and not -1 <= value <= MAX_INT32:
            problems.append(f"{name}={value} must be a token id in [0, {MAX_INT32}] or -1 (none)")
    for name in ("min_tokens", "prompt_ignore_length"):
        if not 0 <= getattr(p, name) <= MAX_INT32:
            problems.append(f"{name}={getattr(p, name)} must be in [0, {MAX_INT32}]")
    if not 1 <= p.beam_width <= MAX_INT32:
        problems.append(f"beam_width={p.beam_width} must be in [1, {MAX_INT32}] (1: no beams)")
    if not math.isfinite(p.length_penalty):
        problems.append(f"length_penalty={p.length_penalty} must be finite")
    if not 0 <= p.early_stopping <= MAX_INT32:
        problems.append(f"early_stopping={p.early_stopping} must be in [0, {MAX_INT32}]")
    if p.lora_name is not None and not LORA_NAME.match(p.lora_name):
        problems.append(f"lora_name={p.lora_name!r} is not an adapter name ({LORA_NAME.pattern})")
    for name in ("logprobs", "prompt_logprobs"):
        value = getattr(p, name)
        if value is not None and not 0 <= value <= MAX_LOGPROBS:
            problems.append(f"{name}={value} must be in [0, {MAX_LOGPROBS}] or None (off)")
    return problems


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = no top-k filter
    top_p: float = 1.0
    # drop tokens less likely than min_p times the likeliest (after temperature); 0 = off
    min_p: float = 0.0
    seed: int | None = None  # None = the engine's own generator
    end_id: int | None = None  # None = the model's eos token(s)
    pad_id: int | None = None  # carried for the Triton model's padded outputs
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    stop_sequences: tuple[tuple[int, ...], ...] = ()  # token-id sequences that end generation
    bad_sequences: tuple[tuple[int, ...], ...] = ()  # token-id sequences never generated
    # penalties, as TensorRT-LLM applies them (docs/trtllm_reference.md, section 9.2): on the
    # logits of tokens the sequence holds, prompt included; presence and frequency skip the
    # first prompt_ignore_length prompt tokens (the prompt's length or more: OpenAI's rule)
    repetition_penalty: float = 1.0  # > 1 discourages repeats (logit / p, or * p if negative)
    presence_penalty: float = 0.0  # subtracted once from each present token's logit
    frequency_penalty: float = 0.0  # subtracted per occurrence
    prompt_ignore_length: int = 0
    min_tokens: int = 0  # end (and stop token) ids are banned until this many are generated
    # log probabilities of the raw model distribution (log_softmax of the model's logits, before
    # biases, bans, penalties and temperature: vLLM's raw_logprobs, OpenAI's): logprobs=N gives
    # each generated token's and its N likeliest alternatives' (0: the token's only)
    logprobs: int | None = None
    # each prompt token's (the first has none) and its N likeliest alternatives'
    prompt_logprobs: int | None = None
    # the model's logits (float32) of every prompt position / of each generated token
    # (TensorRT-LLM's return_context_logits / return_generation_logits)
    return_context_logits: bool = False
    return_generation_logits: bool = False
    return_perf_metrics: bool = False  # its times and KV-cache blocks on its final delta
    # (token id, bias) added to that token's logit before penalties and sampling (OpenAI's
    # logit_bias; TensorRT-LLM's embedding_bias, sparse); sorted by token id
    logit_bias: tuple[tuple[int, float], ...] = ()
    # False: this request never verifies draft tokens (when the engine speculates); its tokens
    # are the same either way for greedy requests, and equally distributed for sampled ones
    speculate: bool = True
    lora_name: str | None = None  # the LoRA adapter to generate with (None: the base model)
    # a grammar the output follows (guided decoding); None: free
    guide: GuidedDecoding | None = None
    # beam search (TensorRT-LLM's beam_width / length_penalty / early_stopping): beam_width > 1
    # returns that many beams, best first, ranked by cum_logprob / length ** length_penalty;
    # early_stopping 1 ends once beam_width beams finished, 0 when no live beam can beat them,
    # > 1 scores live beams at max_tokens (transformers' True / False / "never")
    beam_width: int = 1
    length_penalty: float = 1.0
    early_stopping: int = 1
    # any penalty set (derived; the sampler reads it for every sequence of every launch)
    has_penalties: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "logit_bias", _biases(self.logit_bias))
        problems = _problems(self)
        if problems:
            raise ValueError("SamplingParams: " + "; ".join(problems))
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        object.__setattr__(
            self, "stop_sequences", _token_sequences("stop_sequences", self.stop_sequences)
        )
        object.__setattr__(
            self, "bad_sequences", _token_sequences("bad_sequences", self.bad_sequences)
        )
        object.__setattr__(
            self,
            "has_penalties",
            self.repetition_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0,
        )

    @property
    def scores_tokens(self) -> bool:
        """The sampler keeps something of each generated token's logits for this request."""
        return self.logprobs is not None or self.return_generation_logits

    @property
    def scores_prompt(self) -> bool:
        """The prefill turns this request's prompt positions into logits."""
        return self.prompt_logprobs is not None or self.return_context_logits

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW_TEMPERATURE
