"""One guided request's place in its grammar: an xgrammar matcher advanced by every token the
request keeps, asked for the tokens allowed next."""

from collections import deque

import xgrammar


class GrammarState:
    def __init__(self, compiled: "xgrammar.CompiledGrammar", end_ids: frozenset[int]):
        # the request's end tokens end the grammar (allowed only where it may end); a request
        # with none (ignore_eos) ends where the grammar does
        self.ends_without_stop_token = not end_ids
        self._end_ids = end_ids
        self.matcher = xgrammar.GrammarMatcher(
            compiled,
            override_stop_tokens=sorted(end_ids) or None,
            terminate_without_stop_token=self.ends_without_stop_token,
        )
        # tokens accepted from their launch's host copy before the scheduler appends them
        # (overlap scheduling: the next launch's bitmask is filled first): (token, allowed,
        # whether the matcher ended with it)
        self._ahead: deque[tuple[int, bool, bool]] = deque()
        # ended: as of the tokens the request kept / as of the matcher, past the tokens taken
        # ahead too (kept as flags: a matcher's is_terminated crosses into C++ each time)
        self.is_terminated = False
        self.is_terminated_ahead = False

    def accept(self, token_id: int) -> bool:
        """Advance past this token (the request keeps it); False when the grammar does not
        allow it."""
        if self._ahead:  # advanced already, when the bitmask after it was filled
            ahead, is_allowed, ended = self._ahead.popleft()
            if not is_allowed or ahead != token_id:
                return False
            self.is_terminated = ended
            return True
        if not self.matcher.accept_token(token_id):
            return False
        self.is_terminated = self.is_terminated_ahead = self._ends_with(token_id)
        return True

    def accept_all(self, token_ids: list[int]) -> bool:
        """Keep these tokens when each was taken ahead, allowed, and none ended the grammar
        (what accept would say token by token, with no stop); else False, nothing kept."""
        ahead = self._ahead
        if len(ahead) < len(token_ids):
            return False
        for (token, is_allowed, ended), token_id in zip(ahead, token_ids, strict=False):
            if ended or not is_allowed or token != token_id:
                return False
        for _ in token_ids:
            ahead.popleft()
        return True

    @property
    def num_ahead(self) -> int:
        return len(self._ahead)

    def accept_ahead(self, token_id: int) -> None:
        """Advance past a sampled token the request has not appended yet."""
        if self.matcher.accept_token(token_id):
            self.is_terminated_ahead = self._ends_with(token_id)
            self._ahead.append((token_id, True, self.is_terminated_ahead))
        else:
            self._ahead.append((token_id, False, self.is_terminated_ahead))

    def _ends_with(self, token_id: int) -> bool:
        # a matcher with stop tokens ends with one of them only (xgrammar GrammarMatcher)
        if self.ends_without_stop_token:
            return self.matcher.is_terminated()
        return token_id in self._end_ids

    def discard_ahead(self) -> None:
        """Give back the newest token taken ahead (its launch failed: it is never appended)."""
        _, is_allowed, _ = self._ahead.pop()
        if is_allowed:
            self.matcher.rollback(1)
            self.is_terminated_ahead = self.matcher.is_terminated()
