"""What the requests of a launch ask of its logits: the sampler's inputs, and the log
probabilities (and beam candidates) that go back to them.

The sampler's inputs (sampling_tensors), built once a launch from the rows that sample: each
request's knobs on the device, its seeded generator and penalty counts (Sequence.penalty_counts),
both made the first time, its min_tokens and bad-word bans and logit biases. The sampler
(layers/) only computes on them.

Tokens' log probabilities (LaunchLogprobs) are of the raw model distribution: log_softmax of the
logits the model gave, before logit biases, bans, penalties and temperature (vLLM's default
`raw_logprobs`, the values OpenAI's API documents); the sampled token's value, and with num_top > 0
the likeliest tokens', are computed on the device in the launch, one [S, 1 + 2 * num_top] float32
tensor a step (ids are exact in float32 below 2**24); rows that asked for return_generation_logits
also keep their raw logits. Each step's values are copied to pinned host memory as soon as they
exist, without waiting; the sequences read them once the launch's tokens are on the host, which
the same stream copied after them.

Prompt positions' (PromptScoring: prompt_logprobs, return_context_logits) come from inside the
prefill: the step's output holds every packed row's final hidden state, and for the rows of prompt
positions whose request asked the head runs over those rows only (`compute_logits`), in chunks of
at most CHUNK_ELEMENTS logits (a 128k vocabulary over 2,048 positions is 1 GiB in float32), each
chunk's log_softmax gathered at the next prompt token and its top-N taken on the device; one copy
per launch brings them to the host. A chunked prefill scores each chunk in its own launch; a
decode graph's output is the logits of every row already. One rank only: a tensor-parallel head is
split over the ranks (and a pipeline's last stage is not rank 0), so the engine refuses these
requests with several ranks (LLMEngine).

Beam rows' candidates (LaunchBeamCandidates): each beam's K likeliest next tokens and their log
probabilities, for the beam groups to choose from on the host.
"""

from collections.abc import Callable

import numpy as np
import torch

from pipeline.engine.layers.penalties import Penalties
from pipeline.engine.layers.sampler import SamplingTensors
from pipeline.engine.scheduling.scheduler_output import SchedulerOutput
from pipeline.request.outputs import TopLogprobs

CHUNK_ELEMENTS = 2**25  # logits a chunk makes at once: 128 MiB of float32


def sampling_tensors(seqs: list, device: torch.device, vocab_size: int) -> SamplingTensors:
    """The knobs of these sequences (Sequence objects) for one sampler call; creates a seeded
    request's generator the first time."""
    for seq in seqs:
        if seq.params.seed is not None and seq.generator is None:
            seq.generator = torch.Generator(device=device)
            seq.generator.manual_seed(seq.params.seed)
    params = [seq.params for seq in seqs]
    is_greedy = [p.is_greedy for p in params]
    tensors = SamplingTensors(
        is_greedy=is_greedy,
        generators=[seq.generator for seq in seqs],
        banned_token_ids=[seq.banned_token_ids() for seq in seqs],
        penalties=penalties(seqs, device, vocab_size),
        logit_bias=_logit_bias(params, device),
    )
    if any(p.scores_tokens for p in params):
        tensors.logprobs = LaunchLogprobs(
            max(p.logprobs or 0 for p in params),
            tuple(row for row, p in enumerate(params) if p.return_generation_logits),
        )
        for row, seq in enumerate(seqs):
            if seq.params.scores_tokens:
                seq.expect_logprobs(tensors.logprobs, row)
    if not all(is_greedy):  # greedy batches need no knobs on the device
        tensors.temperatures = torch.tensor(
            # penalized rows are scaled by their penalties (temperature comes first)
            [1.0 if p.is_greedy or p.has_penalties else p.temperature for p in params],
            dtype=torch.float32,
            device=device,
        )
        tensors.top_ks = torch.tensor([p.top_k or vocab_size for p in params], device=device)
        tensors.top_ps = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)
        if any(p.min_p and not p.is_greedy for p in params):
            tensors.min_ps = torch.tensor(
                [p.min_p for p in params], dtype=torch.float32, device=device
            )
    return tensors


def _logit_bias(params: list, device: torch.device):
    pairs = [(row, token, bias) for row, p in enumerate(params) for token, bias in p.logit_bias]
    if not pairs:
        return None
    rows, tokens, biases = zip(*pairs, strict=True)
    return (
        torch.tensor(rows, device=device),
        torch.tensor(tokens, device=device),
        torch.tensor(biases, dtype=torch.float32, device=device),
    )


def _initial_counts(seq, device: torch.device, vocab_size: int) -> torch.Tensor:
    """[2, V]: from the tokens the host holds; a sequence's first sampling has nothing pending."""
    ignore = min(seq.params.prompt_ignore_length, seq.num_prompt_tokens)
    ids = torch.tensor(seq.token_ids, dtype=torch.int64, device=device)
    counts = torch.zeros(2, vocab_size, dtype=torch.float32, device=device)
    counts[0] = torch.bincount(ids[ignore:], minlength=vocab_size)[:vocab_size]
    counts[1] = torch.bincount(ids[:ignore], minlength=vocab_size)[:vocab_size].clamp(max=1)
    return counts


def penalties(seqs: list, device: torch.device, vocab_size: int) -> Penalties | None:
    """The penalties and min_tokens bans of these sequences (Sequence objects) for one launch;
    None when none has any (the sampler's usual path)."""
    penalized = [i for i, seq in enumerate(seqs) if seq.params.has_penalties]
    # generated so far: on the host, plus what launched steps sampled and the host has not read
    generated = {
        i: seq.num_completion_tokens + seq.num_pending_tokens
        for i, seq in enumerate(seqs)
        if seq.params.min_tokens
    }
    min_rows = [i for i, num in generated.items() if num < seqs[i].params.min_tokens]
    if not penalized and not min_rows:
        return None
    out = Penalties(None, None, None, None, None, None, min_rows, [], [])
    for i in min_rows:
        seq = seqs[i]
        out.steps_left.append(seq.params.min_tokens - generated[i])
        ids = seq.end_ids | frozenset(seq.params.stop_token_ids)
        out.end_ids.append(sorted(t for t in ids if 0 <= t < vocab_size))
    if penalized:
        rows = [seqs[i] for i in penalized]
        for seq in rows:
            if seq.penalty_counts is None:
                seq.penalty_counts = _initial_counts(seq, device, vocab_size)
        out.counts = torch.stack([seq.penalty_counts for seq in rows])
        for row, seq in enumerate(rows):
            seq.penalty_counts = out.counts[row]
        params = [seq.params for seq in rows]
        out.rows = torch.tensor(penalized, device=device)
        out.temperatures = _floats([1.0 if p.is_greedy else p.temperature for p in params], device)
        out.repetition = _floats([p.repetition_penalty for p in params], device)
        out.presence = _floats([p.presence_penalty for p in params], device)
        out.frequency = _floats([p.frequency_penalty for p in params], device)
    return out


def _floats(values: list[float], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, device=device)


def to_host(values: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
    if values.device.type != "cuda":
        return values, None
    host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
    host.copy_(values, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return host, event


class LaunchLogprobs:
    def __init__(self, num_top: int = 0, logits_rows: tuple[int, ...] = ()):
        """num_top: the most top alternatives any row asks for; logits_rows: the rows that keep
        their logits (return_generation_logits)."""
        self.num_top = num_top
        self.logits_rows = logits_rows
        self._logits_index: torch.Tensor | None = None
        self._steps: list[tuple[torch.Tensor, torch.cuda.Event | None]] = []
        self._logits: list[tuple[torch.Tensor, torch.cuda.Event | None]] = []
        self._values: list[np.ndarray] | None = None  # [steps] of [S, 1 + 2 * num_top] once read

    def add(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        # logits [S, V] float32, the model's (raw); tokens [S] int64 sampled from them
        logprobs = logits.log_softmax(dim=-1)
        parts = [logprobs.gather(1, tokens[:, None])]
        if self.num_top:
            values, ids = logprobs.topk(self.num_top, dim=-1)
            parts += [values, ids.to(torch.float32)]
        self._steps.append(to_host(torch.cat(parts, dim=1) if self.num_top else parts[0]))
        if self.logits_rows:
            if self._logits_index is None:
                self._logits_index = torch.tensor(self.logits_rows, device=logits.device)
            self._logits.append(to_host(logits.index_select(0, self._logits_index)))

    def _read(self) -> list[np.ndarray]:
        if self._values is None:
            for _, event in self._steps + self._logits:
                if event is not None:
                    event.synchronize()
            self._values = [values.numpy() for values, _ in self._steps]
        return self._values

    def row(self, row: int) -> list[float]:
        """Row `row`'s sampled token's log probability at each step, in step order."""
        return [float(values[row, 0]) for values in self._read()]

    def top_row(self, row: int, num_top: int) -> list[TopLogprobs]:
        """Row `row`'s num_top likeliest (token id, log probability) at each step."""
        n = self.num_top
        return [
            tuple(
                (int(token), float(value))
                for value, token in zip(
                    values[row, 1 : 1 + num_top], values[row, 1 + n : 1 + n + num_top], strict=True
                )
            )
            for values in self._read()
        ]

    def logits_row(self, row: int) -> np.ndarray:
        """Row `row`'s raw logits at each step: [steps, V] float32."""
        self._read()
        at = self.logits_rows.index(row)
        return np.stack([values[at].numpy() for values, _ in self._logits])


class PromptScoring:
    def __init__(self, rows: np.ndarray, targets: np.ndarray, keeps: np.ndarray, bounds, num_top):
        # rows [R] of the step's packed rows; targets [R] the next prompt token (-1: none);
        # keeps [R] bool: the row's logits go back whole; bounds: each entry's [start, end) in R
        self.rows, self.targets, self.keeps = rows, targets, keeps
        self.bounds, self.num_top = bounds, num_top
        self._host: tuple | None = None  # (values, its event, logits, its event) once computed
        self._values: np.ndarray | None = None

    @classmethod
    def plan(cls, batch: SchedulerOutput) -> "PromptScoring | None":
        """The rows of this batch's step to score, each request's given to it; None: none."""
        rows, targets, keeps, bounds, entries, num_top = [], [], [], [], [], 0
        for r, seq in enumerate(batch.seqs):
            builder = seq.prompt_scores
            if builder is None:
                continue
            start = int(batch.num_computed_tokens[r])
            lo, hi = builder.positions(start, int(batch.num_tokens[r]))
            if lo == hi:
                continue
            first_row = int(batch.query_start[r]) - start
            bounds.append((len(rows), len(rows) + hi - lo))
            rows += range(first_row + lo, first_row + hi)
            prompt = seq.token_ids
            targets += [
                prompt[p + 1] if p + 1 < builder.num_prompt_tokens else -1 for p in range(lo, hi)
            ]
            keeps += [builder.keeps_logits] * (hi - lo)
            num_top = max(num_top, builder.num_top or 0)
            entries.append(builder)
        if not rows:
            return None
        scoring = cls(np.array(rows), np.array(targets), np.array(keeps), bounds, num_top)
        for i, builder in enumerate(entries):
            builder.expect(scoring, i)
        return scoring

    @torch.no_grad()
    def compute(
        self,
        out: torch.Tensor,
        compute_logits: Callable[[torch.Tensor], torch.Tensor] | None,
        vocab_size: int,
    ) -> None:
        """out: the step's hidden states [T, hidden] (compute_logits turns rows into logits
        [n, V] float32), or its logits [T, V] (compute_logits None)."""
        device = out.device
        rows = torch.from_numpy(self.rows).to(device)
        targets = torch.from_numpy(self.targets).to(device).clamp(min=0)[:, None]
        keeps = torch.from_numpy(self.keeps).to(device)
        values, kept = [], []
        start = 0
        while start < rows.numel():
            end = min(rows.numel(), start + max(1, CHUNK_ELEMENTS // vocab_size))
            picked = out[rows[start:end]]
            logits = picked.float() if compute_logits is None else compute_logits(picked)
            logprobs = logits.log_softmax(dim=-1)
            parts = [logprobs.gather(1, targets[start:end])]
            if self.num_top:
                top, ids = logprobs.topk(self.num_top, dim=-1)
                parts += [top, ids.to(torch.float32)]
            values.append(torch.cat(parts, dim=1))
            if self.keeps[start:end].any():
                kept.append(logits[keeps[start:end]])
            start = end
        self._host = (*to_host(torch.cat(values)), *(to_host(torch.cat(kept)) if kept else ()))

    def entry(
        self, entry: int, num_top: int
    ) -> tuple[list[float], list[TopLogprobs], np.ndarray | None]:
        """One request's positions: each one's next prompt token's log probability, its num_top
        likeliest tokens, and its logits [n, V] when kept."""
        if self._values is None:
            for i in (1, 3):
                if len(self._host) > i and self._host[i] is not None:
                    self._host[i].synchronize()
            self._values = self._host[0].numpy()
        lo, hi = self.bounds[entry]
        values, n = self._values[lo:hi], self.num_top
        top = [
            tuple(
                (int(t), float(v))
                for v, t in zip(row[1 : 1 + num_top], row[1 + n : 1 + n + num_top], strict=True)
            )
            for row in values
        ]
        logits = None
        if self.keeps[lo]:
            kept_before = int(self.keeps[:lo].sum())
            logits = self._host[2][kept_before : kept_before + hi - lo].numpy()
        return values[:, 0].tolist(), top, logits


class LaunchBeamCandidates:
    """Beam search's share of a launch: each beam row's K likeliest next tokens and their log
    probabilities (log-softmax of the model's float32 logits, as transformers' beam search takes
    them), computed on the device in the launch and copied to the host without waiting; the
    beam groups read them with the launch's tokens (scheduling/beam_search.py)."""

    def __init__(self, rows: list[int], num_top: int, device: torch.device):
        """rows: the sampling rows that are beams; num_top: the most candidates a group takes."""
        self.num_top = num_top
        self._index = torch.tensor(rows, dtype=torch.int64, device=device)
        self._host: tuple[torch.Tensor, torch.cuda.Event | None] | None = None
        self._values: np.ndarray | None = None

    @classmethod
    def plan(cls, batch, device: torch.device) -> "LaunchBeamCandidates | None":
        """The batch's beam rows that sample this launch, each told where its candidates are
        (None when no beam samples)."""
        if batch.beam_rows is None or not batch.beam_rows.size:
            return None
        sampling_row = np.cumsum(batch.samples) - 1  # a sampling row's place among them
        rows = [int(r) for r in batch.beam_rows if batch.samples[r]]
        if not rows:
            return None
        seqs = [batch.seqs[r] for r in rows]
        candidates = cls(
            [int(sampling_row[r]) for r in rows],
            max(seq.beam.group.num_candidates for seq in seqs),
            device,
        )
        for i, seq in enumerate(seqs):
            seq.beam.expect(seq, candidates, i)
        return candidates

    def add(self, logits: torch.Tensor) -> None:
        # logits [S, V] float32 of the launch's sampling rows (its first step)
        logprobs = logits.index_select(0, self._index).float().log_softmax(dim=-1)
        values, ids = logprobs.topk(self.num_top, dim=-1)
        # ids are exact in float64 (and in float32 below 2**24)
        self._host = to_host(torch.cat([values.double(), ids.double()], dim=1))

    def row(self, i: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Beam i's k likeliest tokens: (log probabilities float32, token ids int64), best
        first."""
        if self._values is None:
            host, event = self._host
            if event is not None:
                event.synchronize()
            self._values = host.numpy()
        values = self._values[i]
        n = self.num_top
        return values[:k].astype(np.float32), values[n : n + k].astype(np.int64)
