"""The token bitmask of a launch's guided rows: filled on the host from each row's grammar while
the device runs the step's forward (the runner builds it when it queues the sampler), and sent
in one copy. Rows without a grammar are left unwritten and unmasked (the sampler masks the
guided rows only)."""

import torch

from pipeline.engine.execution.host_buffers import PinnedRing

BITS = 32  # tokens a bitmask word holds (xgrammar's int32 words)


class GrammarBitmask:
    def __init__(self, vocab_size: int, max_rows: int, device: torch.device):
        """vocab_size: the logits' width (the grammars' tokenizer info covers the same)."""
        self.num_words = -(-vocab_size // BITS)
        self.device = device
        # the bitmask's words, then the rows it applies to
        capacity = max_rows * (self.num_words + 1)
        self._ring = PinnedRing(capacity, torch.int32) if device.type == "cuda" else None

    def fill(
        self, seqs: list, last_tokens: tuple[torch.Tensor, torch.cuda.Event | None] | None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(bitmask [S, words] int32, the rows it applies to [R] int32), on the device, for
        these sampling sequences in batch order; None when none has a grammar. last_tokens: the
        last launch's sampled tokens on the host and the event of their copy, where a guided
        row's pending token is (overlap scheduling: the engine has not read them yet)."""
        guided = [(row, seq) for row, seq in enumerate(seqs) if seq.grammar is not None]
        if not guided:
            return None
        # (a launch that failed after its bitmask was filled took its row's token already)
        pending = [seq for _, seq in guided if seq.num_pending_tokens > seq.grammar.num_ahead]
        if pending:  # one a row: a guided row's launches run one step
            tokens, done = last_tokens
            if done is not None:
                done.synchronize()  # before this launch's forward on the stream
            for seq in pending:
                seq.grammar.accept_ahead(int(tokens[seq.pending_row]))
        # a grammar its pending token ended: a wasted row (the request ends), left unmasked
        rows = [row for row, seq in guided if not seq.grammar.is_terminated]
        if not rows:
            return None
        shape = (len(seqs), self.num_words)
        size = shape[0] * shape[1]
        if self._ring is None:
            host = torch.empty(size + len(rows), dtype=torch.int32)
        else:  # pinned, so the copy is queued without waiting for the step in flight
            host = self._ring.take(size + len(rows))
        bitmask = host[:size].view(shape)
        # one row at a time: ~3 us a row for a JSON schema over a 128k vocabulary (its masks are
        # mostly precomputed), where xgrammar's threaded batch fill took 2-5 ms for 64 rows
        for row in rows:
            seqs[row].grammar.fill(bitmask, row)
        # the rows as a tensor too: a list would cross to the device from pageable memory
        host[size:] = torch.tensor(rows, dtype=torch.int32)
        if self._ring is not None:
            host = host.to(self.device, non_blocking=True)
            self._ring.copied()
        return host[:size].view(shape), host[size:]
