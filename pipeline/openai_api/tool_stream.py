"""A choice's pieces with its tool calls read out: text that may be a call is held back, and the
last piece carries the calls found (finish_reason "tool_calls"), sent whole in one delta as the
OpenAI SDK accepts them. Text that is plainly content streams as it comes."""

from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import replace

from pipeline.openai_api.generation import Piece
from pipeline.openai_api.tool_calls import HERMES, ToolPlan, parse_calls

_MARKER = "<tool_call>"


class _Holder:
    """Splits streamed text into what goes out now and what is held (a call, or its start)."""

    def __init__(self, plan: ToolPlan):
        self.holds_all = plan.guide is not None  # a forced call: the whole answer is the call
        self.is_hermes = plan.call_format == HERMES
        self.sent, self.held = "", ""

    def add(self, text: str) -> str:
        if self.holds_all:
            self.held += text
            return ""
        pending = self.held + text
        if not self.is_hermes:  # the answer is a call when it starts with "{"
            start = (self.sent + pending).lstrip()
            if not start or start.startswith("{"):
                self.held = pending
                return ""
            self.held = ""
            self.sent += pending
            return pending
        at = pending.find(_MARKER)  # once found, what is held starts with it
        if at >= 0:
            self.held = pending[at:]
            out = pending[:at]
        else:  # keep a tail that may be the marker's start
            keep = next(
                (
                    n
                    for n in range(min(len(_MARKER) - 1, len(pending)), 0, -1)
                    if _MARKER.startswith(pending[-n:])
                ),
                0,
            )
            self.held = pending[len(pending) - keep :]
            out = pending[: len(pending) - keep]
        self.sent += out
        return out


async def tool_pieces(pieces: AsyncIterator[Piece], plan: ToolPlan) -> AsyncIterator[Piece]:
    holder = _Holder(plan)
    async with aclosing(pieces) as stream:
        async for piece in stream:
            text = holder.add(piece.text)
            if piece.finish_reason is None:
                if text or piece.token_ids:
                    yield replace(piece, text=text)
                continue
            content, calls = parse_calls(holder.sent + holder.held, plan)
            if not calls:
                yield replace(piece, text=text + holder.held)
                return
            # the content before the calls went out already; what is left of it goes now
            rest = content[len(holder.sent.strip()) :].strip() if content else ""
            yield replace(piece, text=rest, finish_reason="tool_calls", tool_calls=tuple(calls))
            return
