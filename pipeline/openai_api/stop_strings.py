"""OpenAI's `stop`, on text: the answer ends just before the first stop string, which is never
sent. The engine also gets the stop strings as token sequences and ends there, but a string can
tokenize differently inside a text (" Paris." vs "Paris"), so the text decides.
"""


class StopChecker:
    """Add each streamed piece of text; get the part that can be sent now. A tail of the text
    that could still grow into a stop string is held back until the next piece tells."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops = stops
        self.is_stopped = False
        self._held = ""

    def add(self, piece: str, is_final: bool) -> str:
        text = self._held + piece
        self._held = ""
        if not self.stops or self.is_stopped:
            return "" if self.is_stopped else text
        cuts = [i for i in (text.find(stop) for stop in self.stops) if i >= 0]
        if cuts:
            self.is_stopped = True
            return text[: min(cuts)]
        if is_final:
            return text
        num_held = self._partial_stop_len(text)
        self._held = text[len(text) - num_held :]
        return text[: len(text) - num_held]

    def _partial_stop_len(self, text: str) -> int:
        """Length of the longest end of text that begins a stop string (0: none)."""
        longest = min(len(text), max(len(stop) for stop in self.stops) - 1)
        for length in range(longest, 0, -1):
            tail = text[-length:]
            if any(stop.startswith(tail) for stop in self.stops):
                return length
        return 0
