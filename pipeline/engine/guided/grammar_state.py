"""One guided request's place in its grammar: an xgrammar matcher advanced by every token the
request keeps, asked for the tokens allowed next."""

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

    @property
    def is_terminated(self) -> bool:
        return self._matcher.is_terminated()

    def accept(self, token_id: int) -> bool:
        """Advance past this token; False when the grammar does not allow it."""
        return self._matcher.accept_token(token_id)

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the tokens allowed next into bitmask's row ([rows, ceil(V / 32)] int32)."""
        self._matcher.fill_next_token_bitmask(bitmask, row)
