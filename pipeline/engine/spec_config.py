"""Speculative decoding settings of the torch engine (a runtime option, checked here).

method: none (off), prompt_lookup (drafts copied from an earlier match of the request's last
n-gram, no second model) or draft_model (a smaller Llama-family engine with the target's
tokenizer, run greedily on a KV cache of its own). Every step, each eligible decoding request
feeds its newest token and up to num_draft_tokens drafts to one target step; the longest prefix
the target agrees with is kept, plus the target's own next token (docs/guide/speculative.md).
"""

from dataclasses import dataclass, fields

from pipeline.errors import ConfigError

METHODS = ("none", "prompt_lookup", "draft_model")


@dataclass(frozen=True, slots=True)
class SpecConfig:
    method: str = "none"
    num_draft_tokens: int = 4  # k: drafts a request verifies per step at most
    # shorten k per request while its drafts are rejected: a draft position is kept while its
    # estimated chance of acceptance is at least draft_token_cost; at 0 the request drafts one
    # token every probe_interval steps to measure again
    adaptive: bool = True
    draft_token_cost: float = 0.1
    probe_interval: int = 16
    # no drafts while the engine holds more requests than this, running or waiting to be
    # admitted: a large batch is compute-bound, so extra verified tokens cost as much as decode
    # steps (vLLM's speculative_disable_by_batch_size), and a queue means the batch is about to
    # grow; 0 = no limit
    max_batch_size: int = 32
    # prompt_lookup: the longest and shortest n-gram matched (the longest that matches wins)
    max_ngram: int = 3
    min_ngram: int = 1
    # draft_model: its engine dir (built with backend=torch); its KV blocks (0: the CPU's
    # default, or a fraction of the GPU memory the target left)
    draft_engine_dir: str = ""
    draft_num_kv_blocks: int = 0

    @property
    def enabled(self) -> bool:
        return self.method != "none"


def spec_config(value: "SpecConfig | dict | None", where: str) -> SpecConfig:
    """The runtime option `speculation` (a SpecConfig, its fields as a dict, or None: off),
    checked; ConfigError naming every bad field and its allowed values."""
    if value is None:
        return SpecConfig()
    if isinstance(value, dict):
        known = {f.name for f in fields(SpecConfig)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(
                f"{where}: speculation has unknown keys {unknown}; "
                f"known: {', '.join(sorted(known))}"
            )
        value = SpecConfig(**value)
    problems = []
    if value.method not in METHODS:
        problems.append(f"method={value.method!r} (use one of {', '.join(METHODS)})")
    if not 1 <= value.num_draft_tokens <= 16:
        problems.append(f"num_draft_tokens={value.num_draft_tokens} must be in [1, 16]")
    if not 0.0 <= value.draft_token_cost <= 1.0:
        problems.append(f"draft_token_cost={value.draft_token_cost} must be in [0, 1]")
    if value.probe_interval < 1:
        problems.append(f"probe_interval={value.probe_interval} must be >= 1")
    if value.max_batch_size < 0:
        problems.append(f"max_batch_size={value.max_batch_size} must be >= 0 (0: no limit)")
    if not 1 <= value.min_ngram <= value.max_ngram:
        problems.append(
            f"min_ngram={value.min_ngram}, max_ngram={value.max_ngram}: need 1 <= min <= max"
        )
    if value.method == "draft_model" and not value.draft_engine_dir:
        problems.append("method=draft_model needs draft_engine_dir (a torch engine dir)")
    if value.draft_num_kv_blocks < 0:
        problems.append(f"draft_num_kv_blocks={value.draft_num_kv_blocks} must be >= 0")
    if problems:
        raise ConfigError(f"{where}: bad speculation settings: {'; '.join(problems)}")
    return value
