"""What a verify step's tokens mean: each row's accepted drafts and the target's next token.

A row that verified drafts d_1..d_k got the target's token t_j at each of its k + 1 positions
(t_j follows d_1..d_j). Drafts are accepted while t_j == d_{j+1}; the first t_j that differs
(or t_k after all k) is the target's own token. With a greedy target t_j is the argmax; with
sampling it is a draw from the target's distribution at that position, and accepting the draft
exactly when the draw equals it is Leviathan et al.'s rejection sampling for a draft that is a
point mass (prompt lookup, a greedy draft model): the draft is kept with probability p(d), and
a rejected position yields t ~ p restricted to t != d, i.e. norm(max(0, p - q)).
"""


def accepted_tokens(drafts: tuple[int, ...], targets: list[int]) -> tuple[list[int], int]:
    """(the tokens a row emits: its accepted drafts and the target's next token, how many
    drafts were accepted); targets: its 1 + len(drafts) tokens."""
    num_accepted = 0
    for draft, target in zip(drafts, targets, strict=False):
        if draft != target:
            break
        num_accepted += 1
    return targets[: num_accepted + 1], num_accepted


def rows_of(drafts: list[tuple[int, ...]], tokens: list[int]) -> list[list[int]]:
    """Split a verify launch's tokens (row after row, 1 + len(drafts[r]) each) by row."""
    rows, start = [], 0
    for row_drafts in drafts:
        end = start + 1 + len(row_drafts)
        rows.append(tokens[start:end])
        start = end
    return rows
