"""One guided request's place in its grammar: an xgrammar matcher advanced by every token the
request keeps, asked for the tokens allowed next."""

from collections import deque

import torch
import xgrammar


class GrammarState:
    def __init__(self, compiled: "xgrammar.CompiledGrammar", end_ids: frozenset[int]):
        # the request's end tokens end the grammar (allowed only where it may end); a request
        # with none (ignore_eos) ends where the grammar does
        self.ends_without_stop_token = not end_ids
        self._matcher = xgrammar.GrammarMatcher(
            compiled,
            override_stop_tokens=sorted(end_ids) or None,
            terminate_without_stop_token=self.ends_without_stop_token,
        )
        # tokens accepted from their launch's host copy before the scheduler appends them
        # (overlap scheduling: the next launch's bitmask is filled first); False: refused
        self._ahead: deque[tuple[int, bool]] = deque()

    @property
    def matcher(self) -> "xgrammar.GrammarMatcher":
        return self._matcher

    @property
    def is_terminated(self) -> bool:
        return self._matcher.is_terminated()

    def accept(self, token_id: int) -> bool:
        """Advance past this token (the request keeps it); False when the grammar does not
        allow it."""
        if self._ahead:  # advanced already, when the bitmask after it was filled
            ahead, is_allowed = self._ahead.popleft()
            return is_allowed and ahead == token_id
        return self._matcher.accept_token(token_id)

    @property
    def num_ahead(self) -> int:
        return len(self._ahead)

    def accept_ahead(self, token_id: int) -> None:
        """Advance past a sampled token the request has not appended yet."""
        self._ahead.append((token_id, self._matcher.accept_token(token_id)))

    def discard_ahead(self) -> None:
        """Give back the newest token taken ahead (its launch failed: it is never appended)."""
        _, is_allowed = self._ahead.pop()
        if is_allowed:
            self._matcher.rollback(1)

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the tokens allowed next into bitmask's row ([rows, ceil(V / 32)] int32)."""
        self._matcher.fill_next_token_bitmask(bitmask, row)
