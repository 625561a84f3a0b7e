"""Draft-model proposals: a smaller engine of the target's family and tokenizer, run greedily.

The draft engine is a ModelRunner of its own (its weights, its paged KV cache, its CUDA graphs)
with a block manager of its own. Each request that drafts has a shadow sequence there, reading
the request's own token list: a proposal launch feeds the tokens the draft has not seen (after a
verify step: the target's token, and the accepted drafts it had not fed) and then decodes k - 1
more steps on the device, all in one launch (the runner's several steps a launch), so its k
greedy tokens come back in one copy. Drafts the target rejected are dropped from the shadow by
rolling its num_computed_tokens back to the tokens both still agree on. A greedy draft is a point
mass, so the target's verify step stays exact for sampled requests too (spec_tokens.py).
"""

import dataclasses
from pathlib import Path

from pipeline.engine.engine_config import EngineConfig, load_engine_config
from pipeline.engine.execution.model_runner import ModelRunner
from pipeline.engine.execution.weights import load_rank_weights
from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.scheduler_output import LaunchPlan, scheduler_output
from pipeline.engine.scheduling.sequence import Sequence
from pipeline.errors import ConfigError
from pipeline.request.sampling_params import SamplingParams

GREEDY = SamplingParams(max_tokens=1)


@dataclasses.dataclass(slots=True)
class _Shadow:
    seq: Sequence  # the draft engine's view of the request (its token list is the request's)
    base: int = 0  # the request's tokens when the last proposal launch ran
    proposals: list[int] = dataclasses.field(default_factory=list)  # that launch's tokens


def draft_engine_config(target: EngineConfig) -> EngineConfig:
    """The draft engine's config: its dir's build, the target's device and batch, k steps a
    launch; ConfigError when it cannot draft for this target."""
    spec = target.speculation
    path = Path(spec.draft_engine_dir)
    runtime = {
        "max_batch_size": target.max_batch_size,
        "num_scheduler_steps": spec.num_draft_tokens,
        "overlap_scheduling": False,
        "num_kv_blocks": spec.draft_num_kv_blocks or None,
    }
    where = f"speculation.draft_engine_dir={str(path)!r}"
    try:
        config = load_engine_config(path, str(target.device), runtime)
    except ConfigError as exc:
        raise ConfigError(
            f"{where}: {exc} (the draft engine's build limits must cover the "
            f"target's max_batch_size={target.max_batch_size})"
        ) from exc
    problems = []
    if config.model.vocab_size != target.model.vocab_size:
        problems.append(
            f"vocab_size {config.model.vocab_size} != the target's {target.model.vocab_size} "
            f"(a draft model needs the target's tokenizer)"
        )
    if config.max_seq_len < target.max_seq_len:
        problems.append(
            f"max_seq_len {config.max_seq_len} < the target's {target.max_seq_len} (rebuild the "
            f"draft with build.max_seq_len={target.max_seq_len})"
        )
    if config.model.tp_size * config.model.pp_size != 1:
        problems.append("a draft engine runs on one rank (build it with tp_size=pp_size=1)")
    if problems:
        raise ConfigError(f"{where}: cannot draft for {target.engine_dir}: {'; '.join(problems)}")
    return config


class DraftModelProposer:
    def __init__(self, target: EngineConfig):
        config = draft_engine_config(target)
        weights = load_rank_weights(config.engine_dir, 0, config.device, config.weights_loader)
        self.runner = ModelRunner(config, weights)
        del weights
        self.num_steps = target.speculation.num_draft_tokens
        self.max_num_tokens = config.max_num_tokens
        self.blocks = BlockManager(
            self.runner.num_kv_blocks,
            config.block_size,
            config.max_batch_size,
            self.runner.max_blocks_per_seq,
        )
        self._shadows: dict[Sequence, _Shadow] = {}

    def propose(self, seqs: list[Sequence], num_drafts: list[int]) -> list[list[int]]:
        """Each sequence's greedy drafts, num_drafts[i] of them ([] where the draft engine's
        KV cache has no room for it)."""
        shadows = [self._synced(seq) for seq in seqs]
        self._catch_up(shadows)
        lookahead = self.num_steps - 1
        launched, num_tokens = [], []
        for shadow in shadows:
            draft = shadow.seq
            num = draft.num_uncomputed_tokens
            if self.blocks.grow(draft, draft.kv_tokens_after(num, lookahead)):
                launched.append(shadow)
                num_tokens.append(num)
        if not launched:
            return [[] for _ in seqs]
        batch = scheduler_output([s.seq for s in launched], num_tokens, self.blocks.tables)
        sampled = self.runner.launch(batch, LaunchPlan(self.num_steps, 0))
        tokens = sampled.tolist()
        num_rows = len(launched)
        for row, (shadow, num) in enumerate(zip(launched, num_tokens, strict=True)):
            shadow.seq.num_computed_tokens += num + lookahead
            shadow.base = shadow.seq.num_tokens
            shadow.proposals = tokens[row::num_rows]
        ran = {id(shadow) for shadow in launched}
        return [
            shadow.proposals[:k] if id(shadow) in ran else []
            for shadow, k in zip(shadows, num_drafts, strict=True)
        ]

    def _synced(self, seq: Sequence) -> _Shadow:
        """seq's shadow, its K/V rolled back to the tokens the request still holds."""
        shadow = self._shadows.get(seq)
        if shadow is None:
            draft = Sequence(seq.request_id, [], GREEDY, ())
            draft.token_ids = seq.token_ids  # the same list: it sees every token appended
            draft.max_kv_tokens = seq.max_kv_tokens
            shadow = self._shadows[seq] = _Shadow(draft)
            return shadow
        tokens = seq.token_ids
        agreed = shadow.base
        for proposal in shadow.proposals[: self.num_steps - 1]:  # the ones it fed back
            if agreed >= len(tokens) or tokens[agreed] != proposal:
                break
            agreed += 1
        draft = shadow.seq
        draft.num_computed_tokens = min(draft.num_computed_tokens, agreed, len(tokens) - 1)
        return shadow

    def _catch_up(self, shadows: list[_Shadow]) -> None:
        """Feed long backlogs (a new request's prompt) in chunks that sample nothing, until
        one launch holds every row's remaining tokens."""
        while sum(s.seq.num_uncomputed_tokens for s in shadows) > self.max_num_tokens:
            budget, rows, num_tokens = self.max_num_tokens, [], []
            for shadow in shadows:
                draft = shadow.seq
                num = min(draft.num_uncomputed_tokens - 1, budget)
                if num > 0 and self.blocks.grow(draft, draft.num_computed_tokens + num):
                    rows.append(draft)
                    num_tokens.append(num)
                    budget -= num
            if not rows:
                return
            batch = scheduler_output(rows, num_tokens, self.blocks.tables)
            self.runner.launch(batch, LaunchPlan(1, 0))
            for draft, num in zip(rows, num_tokens, strict=True):
                draft.num_computed_tokens += num

    def drop(self, seq: Sequence) -> None:
        shadow = self._shadows.pop(seq, None)
        if shadow is not None:
            self.blocks.free(shadow.seq)

    def close(self) -> None:
        self.runner.close()
