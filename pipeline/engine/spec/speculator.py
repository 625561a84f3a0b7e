"""The engine's side of speculative decoding: before each schedule, drafts for the decoding
requests that may speculate (plan, then propose); after a verify step, the acceptance counts.

Which requests speculate: those decoding (their prompt done, nothing pending), whose request
allows it (SamplingParams.speculate) and whose sampling has no per-position state the verify
step would have to carry along its drafts: no penalties, no bad word sequences, no log
probabilities, min_tokens reached. The others decode as usual in the same steps. No request
drafts while the engine holds more than spec.max_batch_size requests, running or waiting to be
admitted (compute-bound: drafts would cost as much as they save; and while requests queue
behind the batch, a verify step, which runs alone, would hold up the launches that admit them).
That check comes first, so a large batch's step costs the speculator no scan of its requests.
Drafts never run past a request's max_tokens.
"""

from typing import Protocol

from pipeline.engine.engine_config import EngineConfig
from pipeline.engine.scheduling.sampled_tokens import SampledTokens
from pipeline.engine.scheduling.sequence import Sequence
from pipeline.engine.scheduling.spec_tokens import accepted_tokens, rows_of
from pipeline.engine.spec.acceptance import Acceptance
from pipeline.engine.spec.draft_model import DraftModelProposer
from pipeline.engine.spec.prompt_lookup import PromptLookupProposer
from pipeline.engine.spec_config import SpecConfig


class Proposer(Protocol):
    def propose(self, seqs: list[Sequence], num_drafts: list[int]) -> list[list[int]]: ...

    def drop(self, seq: Sequence) -> None: ...

    def close(self) -> None: ...


def can_speculate(seq: Sequence) -> bool:
    p = seq.params
    return (
        p.speculate
        and not p.has_penalties
        and not p.bad_sequences
        and not p.scores_tokens  # log probabilities and logits are read one token a step
        and p.guide is None  # a grammar's matcher takes one token a step
        and seq.num_completion_tokens >= p.min_tokens
    )


class Speculator:
    def __init__(self, spec: SpecConfig, proposer: Proposer):
        self.spec, self.proposer = spec, proposer
        self._acceptance: dict[Sequence, Acceptance] = {}  # requests that drafted, unfinished
        self._drafted: list[Sequence] = []  # whose draft_token_ids the last propose() set
        self._num_steps = self._num_rows = self._num_drafts = self._num_accepted = 0

    def plan(self, running: list[Sequence], num_waiting: int = 0) -> list[tuple[Sequence, int]]:
        """The decoding sequences that draft next, and how many tokens each at most; clears
        the drafts of the last schedule. num_waiting: requests not admitted yet. Empty: a plain
        step (too many requests, or none may or wants to draft), which keeps overlap scheduling
        and several steps a launch; otherwise the engine first reads the launch in flight, as
        drafts follow a request's newest token."""
        for seq in self._drafted:
            seq.draft_token_ids = []
        self._drafted = []
        for seq in [s for s in self._acceptance if s.is_finished]:
            del self._acceptance[seq]
            self.proposer.drop(seq)
        spec = self.spec
        if spec.max_batch_size and len(running) + num_waiting > spec.max_batch_size:
            return []
        planned = []
        for seq in running:
            if seq.num_uncomputed_tokens != 1 or not can_speculate(seq):
                continue
            acceptance = self._acceptance.get(seq)
            if acceptance is None:
                acceptance = self._acceptance[seq] = Acceptance()
            k = spec.num_draft_tokens
            if spec.adaptive:
                k = acceptance.num_drafts(k, spec.draft_token_cost, spec.probe_interval)
            if k > 0:
                planned.append((seq, k))
        return planned

    def propose(self, planned: list[tuple[Sequence, int]]) -> None:
        """Set the draft_token_ids of the planned sequences still decoding, with every token on
        the host. A request the proposer finds nothing for counts it as a rejected draft, so
        the adaptive mode stops holding steps back for it."""
        seqs, counts = [], []
        for seq, k in planned:
            # the target's own token follows the drafts: at most max_tokens - 1 of them
            k = min(k, seq.params.max_tokens - seq.num_completion_tokens - 1)
            if k > 0 and not seq.is_finished and not seq.num_pending_tokens:
                seqs.append(seq)
                counts.append(k)
        if not seqs:
            return
        for seq, drafts in zip(seqs, self.proposer.propose(seqs, counts), strict=True):
            if drafts:
                seq.draft_token_ids = drafts
                self._drafted.append(seq)
            else:
                self._acceptance[seq].observe(1, 0)

    def observe(self, sampled: SampledTokens, tokens: list[int]) -> None:
        """A verify step's tokens are on the host: count what each drafted row kept."""
        self._num_steps += 1
        for seq, drafts, targets in zip(
            sampled.seqs, sampled.drafts, rows_of(sampled.drafts, tokens), strict=True
        ):
            if not drafts:
                continue
            _, num_accepted = accepted_tokens(drafts, targets)
            self._num_rows += 1
            self._num_drafts += len(drafts)
            self._num_accepted += num_accepted
            acceptance = self._acceptance.get(seq)
            if acceptance is not None:
                acceptance.observe(len(drafts), num_accepted)

    def stats(self) -> dict:
        rows = self._num_rows
        return {
            "spec_method": self.spec.method,
            "spec_num_draft_tokens": self.spec.num_draft_tokens,
            "spec_num_verify_steps": self._num_steps,  # launches with drafts: each runs alone
            "spec_num_verify_rows": rows,
            "spec_num_drafted_tokens": self._num_drafts,
            "spec_num_accepted_tokens": self._num_accepted,
            "spec_acceptance_rate": self._num_accepted / self._num_drafts if rows else 0.0,
            # drafts kept per request and verify step (its tokens that step: one more)
            "spec_mean_accepted_tokens": self._num_accepted / rows if rows else 0.0,
        }

    def close(self) -> None:
        self.proposer.close()


def speculation_stats(speculator: Speculator | None) -> dict:
    """The engine's speculation stats (zeros when it does not speculate)."""
    if speculator is not None:
        return speculator.stats()
    return {
        "spec_method": "none",
        "spec_num_draft_tokens": 0,
        "spec_num_verify_steps": 0,
        "spec_num_verify_rows": 0,
        "spec_num_drafted_tokens": 0,
        "spec_num_accepted_tokens": 0,
        "spec_acceptance_rate": 0.0,
        "spec_mean_accepted_tokens": 0.0,
    }


def make_speculator(config: EngineConfig) -> Speculator | None:
    """The speculator of an engine with this config; None when speculation is off."""
    spec = config.speculation
    if not spec.enabled:
        return None
    if spec.method == "prompt_lookup":
        return Speculator(spec, PromptLookupProposer(spec.max_ngram, spec.min_ngram))
    return Speculator(spec, DraftModelProposer(config))
