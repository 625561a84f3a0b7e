"""One guided request's place in its grammar: an xgrammar matcher advanced by every token the
request keeps, asked for the tokens allowed next (a launch's rows together, on several threads:
a 128k vocabulary's mask takes tens of us a row, hundreds of rows a step)."""

import functools
import os
from collections import deque

import torch
import xgrammar

MAX_FILL_THREADS = 8


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

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the tokens allowed next into bitmask's row ([rows, ceil(V / 32)] int32)."""
        self._matcher.fill_next_token_bitmask(bitmask, row)

    @staticmethod
    def fill_rows(states: list["GrammarState"], bitmask: torch.Tensor, rows: list[int]) -> None:
        """Each state's allowed tokens into its row of bitmask (rows[i] for states[i])."""
        if len(states) == 1:
            states[0].fill(bitmask, rows[0])
            return
        matchers = [state._matcher for state in states]
        _batch_matcher().batch_fill_next_token_bitmask(matchers, bitmask, rows)


@functools.cache
def _batch_matcher() -> "xgrammar.BatchGrammarMatcher":
    return xgrammar.BatchGrammarMatcher(min(MAX_FILL_THREADS, os.cpu_count() or 1))
