"""The token bitmask of a launch's guided rows: filled on the host from each row's grammar while
the device runs the step's forward (the runner builds it when it queues the sampler), and sent
in one copy. Rows without a grammar are left unwritten and unmasked (the sampler masks the
guided rows only).

A launch of several steps fills one bitmask a step: before step j's sampler is queued, the
tokens step j - 1 sampled come back to the host (a small copy the runner queues after that
sampler, into a pinned ring of its own) and advance each guided row's matcher; the device
meanwhile runs step j's forward, which reads those tokens on the device. So the host's share a
step is one token copy, the matchers and the fill, hidden behind a forward wherever that
forward takes longer."""

import torch

from pipeline.engine.execution.host_buffers import PinnedRing
from pipeline.engine.execution.phase_range import phase

BITS = 32  # tokens a bitmask word holds (xgrammar's int32 words)

HostTokens = tuple[torch.Tensor, torch.cuda.Event | None]  # tokens on the host, their copy's event


class GrammarBitmask:
    def __init__(self, vocab_size: int, max_rows: int, device: torch.device):
        """vocab_size: the logits' width (the grammars' tokenizer info covers the same)."""
        # xgrammar's batch fill on one thread, this one: a single call a fill, no Python a row.
        # Its thread pool costs more than it saves at any batch: on an H200 host (16 cores, 8
        # fill threads) SmolLM2's guided / free fell from 0.88 to 0.72 at batch 64; a 64-row fill
        # inside a JSON string field takes ~0.55 ms on one thread and ~1 ms on two (2-core host)
        self._filler = None
        self.num_words = -(-vocab_size // BITS)
        self.device = device
        # the bitmask's words, then the rows it applies to
        capacity = max_rows * (self.num_words + 1)
        self._ring = PinnedRing(capacity, torch.int32) if device.type == "cuda" else None
        # the grammars that took a token inside the launch being queued, a list a step: given
        # back when that launch fails, since its tokens never reach the sequences
        self._taken: list = []

    def start_launch(self) -> None:
        self._taken = []

    def discard_launch(self) -> None:
        """The launch being queued failed: its steps' tokens leave the matchers."""
        for grammars in reversed(self._taken):
            for grammar in grammars:
                grammar.discard_ahead()
        self._taken = []

    def fill(
        self, seqs: list, last_tokens: HostTokens | None, step_tokens: HostTokens | None = None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(bitmask [S, words] int32, the rows it applies to [R] int32), on the device, for
        these sampling sequences in batch order; None when none has a grammar. last_tokens: the
        last launch's last step's sampled tokens on the host and the event of their copy, where
        a guided row's pending token is (overlap scheduling: the engine has not read them yet).
        step_tokens: inside a launch, the step before's tokens of these same rows."""
        guided = [(row, seq.grammar) for row, seq in enumerate(seqs) if seq.grammar is not None]
        if not guided:
            return None
        with phase("guided.accept"):
            self._accept(seqs, guided, last_tokens, step_tokens)
        # a grammar its pending token ended: a wasted row (the request ends), left unmasked
        live = [(row, grammar) for row, grammar in guided if not grammar.is_terminated_ahead]
        if not live:
            return None
        with phase("guided.fill"):
            rows = [row for row, _ in live]
            shape = (len(seqs), self.num_words)
            size = shape[0] * shape[1]
            if self._ring is None:
                host = torch.empty(size + len(rows), dtype=torch.int32)
            else:  # pinned, so the copy is queued without waiting for the step in flight
                host = self._ring.take(size + len(rows))
            bitmask = host[:size].view(shape)
            matchers = [grammar.matcher for _, grammar in live]
            self._batch_filler().batch_fill_next_token_bitmask(matchers, bitmask, rows)
            # the rows as a tensor too: a list would cross to the device from pageable memory
            host[size:] = torch.tensor(rows, dtype=torch.int32)
        if self._ring is not None:
            with phase("guided.copy"):
                host = host.to(self.device, non_blocking=True)
                self._ring.copied()
        return host[:size].view(shape), host[size:]

    def _accept(
        self,
        seqs: list,
        guided: list,
        last_tokens: HostTokens | None,
        step_tokens: HostTokens | None,
    ) -> None:
        """Advance each guided row's matcher past its token not taken yet."""
        if step_tokens is not None:  # every row that still runs its grammar sampled one
            pending = [(row, grammar) for row, grammar in guided if not grammar.is_terminated_ahead]
            tokens = step_tokens
        else:  # (a launch that failed after its bitmask was filled took its row's token already)
            pending = [
                (seqs[row].pending_row, grammar)
                for row, grammar in guided
                if seqs[row].num_pending_tokens > grammar.num_ahead
            ]
            tokens = last_tokens
        if not pending:
            return
        host, done = tokens
        if done is not None:
            done.synchronize()  # before this launch's forward on the stream
        values = host.tolist()  # one conversion, not one a row
        # one matcher call a row: xgrammar's batch_accept_token costs more, its answers coming
        # back as an FFI array read an element at a time
        for row, grammar in pending:
            grammar.accept_ahead(values[row])
        if step_tokens is not None:
            self._taken.append([grammar for _, grammar in pending])

    def _batch_filler(self):
        if self._filler is None:
            import xgrammar

            self._filler = xgrammar.BatchGrammarMatcher(1)
        return self._filler
