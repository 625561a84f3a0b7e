"""The sampled tokens' log probabilities in OpenAI's two shapes: chat's `content` entries and
the completions' parallel lists. The engine gives the sampled token's only, so chat's
`top_logprobs` are empty and the completions' hold that token alone."""

from pipeline.triton_models.detokenizer import Detokenizer


class LogprobsWriter:
    def __init__(self, detokenizer: Detokenizer, is_chat: bool):
        self.detokenizer, self.is_chat = detokenizer, is_chat

    def part(self, token_ids, logprobs, text_offset: int) -> dict:
        """These tokens' entries; text_offset: where the first one's text starts in the
        choice's text (completions' text_offset)."""
        texts = [self.detokenizer.decode([token_id]) for token_id in token_ids]
        if self.is_chat:
            return {
                "content": [
                    {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                    for t, lp in zip(texts, logprobs, strict=True)
                ]
            }
        offsets = []
        for text in texts:
            offsets.append(text_offset)
            text_offset += len(text)
        return {
            "tokens": texts,
            "token_logprobs": list(logprobs),
            "top_logprobs": [{t: lp} for t, lp in zip(texts, logprobs, strict=True)],
            "text_offset": offsets,
        }

    @staticmethod
    def text_len(part: dict) -> int:
        tokens = part.get("tokens") or [e["token"] for e in part.get("content", [])]
        return sum(len(t) for t in tokens)
