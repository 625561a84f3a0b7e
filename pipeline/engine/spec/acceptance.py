"""How many drafts a request proposes next: its recent acceptance, against what a draft costs.

A draft at position j is accepted only if the j - 1 before it were, so with a per-draft
acceptance rate a its expected gain is a**j tokens, while verifying it costs draft_token_cost
of a decode step (the step's extra query token). The adaptive mode keeps the positions whose
gain is at least that cost; a request whose drafts keep failing drops to none and drafts a
single token every probe_interval steps to measure again.
"""

# weight of the past in the running counts: about the last five verify steps count
DECAY = 0.8


class Acceptance:
    """One request's running counts of accepted drafts and of rejections (a verify step that
    kept fewer drafts than it checked ends in one)."""

    __slots__ = ("accepted", "rejected", "idle_steps")

    def __init__(self):
        self.accepted, self.rejected = 1.0, 0.0  # optimistic: start at the full k
        self.idle_steps = 0

    @property
    def rate(self) -> float:
        """Estimated chance that a draft is accepted, given the ones before it were."""
        return self.accepted / (self.accepted + self.rejected)

    def observe(self, num_drafts: int, num_accepted: int) -> None:
        self.accepted = DECAY * self.accepted + num_accepted
        self.rejected = DECAY * self.rejected + (num_accepted < num_drafts)

    def num_drafts(self, max_drafts: int, draft_token_cost: float, probe_interval: int) -> int:
        """Drafts to propose next (0..max_drafts)."""
        rate, num = self.rate, 0
        while num < max_drafts and rate ** (num + 1) >= draft_token_cost:
            num += 1
        if num:
            self.idle_steps = 0
            return num
        self.idle_steps += 1
        if self.idle_steps >= probe_interval:
            self.idle_steps = 0
            return min(1, max_drafts)
        return 0
