"""Log probabilities in OpenAI's two shapes: chat's `content` entries (each token's text, value,
bytes and `top_logprobs` list) and the legacy completions' parallel lists (`tokens`,
`token_logprobs`, `top_logprobs` dicts, `text_offset`). Values are of the model's own
distribution (docs/trtllm_reference.md, section 9.3).

Completions' `top_logprobs` hold the N likeliest tokens and the sampled one, as vLLM's; with
`echo` the prompt's tokens come first, the first of them with None (nothing comes before it),
as OpenAI's legacy API answers.
"""

from pipeline.openai_api.response_scores import ResponseScores
from pipeline.triton_models.detokenizer import Detokenizer


class LogprobsWriter:
    def __init__(self, detokenizer: Detokenizer, is_chat: bool, prompts: list[list[int]]):
        """prompts: each choice's prompt token ids (echoed with their log probabilities)."""
        self.detokenizer, self.is_chat, self.prompts = detokenizer, is_chat, prompts

    def _text(self, token_id: int) -> str:
        return self.detokenizer.decode([token_id])

    def part(self, token_ids, logprobs, text_offset: int, tops=None) -> dict:
        """These tokens' entries; text_offset: where the first one's text starts in the
        choice's text (completions' text_offset); tops: each token's likeliest ((id, logprob),
        ...) or None."""
        texts = [self._text(token_id) for token_id in token_ids]
        tops = tops or [()] * len(texts)
        if self.is_chat:
            return {
                "content": [
                    {
                        "token": text,
                        "logprob": lp,
                        "bytes": list(text.encode()),
                        "top_logprobs": [self._chat_entry(t, v) for t, v in top],
                    }
                    for text, lp, top in zip(texts, logprobs, tops, strict=True)
                ]
            }
        return self._lists(texts, list(logprobs), self._dicts(texts, logprobs, tops), text_offset)

    def prompt_part(self, index: int, scores: ResponseScores) -> dict:
        """Choice `index`'s prompt tokens' entries (completions with echo)."""
        ids = self.prompts[index]
        texts = [self._text(token_id) for token_id in ids]
        tops = scores.prompt_top_logprobs or [()] * len(ids)
        dicts = self._dicts(texts[1:], scores.prompt_logprobs[1:], tops[1:])
        return self._lists(texts, scores.prompt_logprobs, [None, *dicts], 0)

    def choice_part(self, index: int, answer) -> dict:
        """A whole answer's choice: its prompt's entries (echo) and then its tokens'."""
        prompt = answer.prompts[index]
        head = None if prompt is None else self.prompt_part(index, prompt)
        offset = 0 if head is None else self.text_len(head)
        tops = answer.top_logprobs[index] or None
        tail = self.part(answer.token_ids[index], answer.logprobs[index], offset, tops)
        return tail if head is None else {key: head[key] + tail[key] for key in tail}

    def _dicts(self, texts, logprobs, tops) -> list[dict]:
        dicts = []
        for text, lp, top in zip(texts, logprobs, tops, strict=True):
            entry = {self._text(t): v for t, v in top}
            entry.setdefault(text, lp)
            dicts.append(entry)
        return dicts

    def _chat_entry(self, token_id: int, logprob: float) -> dict:
        text = self._text(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    @staticmethod
    def _lists(texts, logprobs, dicts, text_offset: int) -> dict:
        offsets = []
        for text in texts:
            offsets.append(text_offset)
            text_offset += len(text)
        return {
            "tokens": texts,
            "token_logprobs": list(logprobs),
            "top_logprobs": dicts,
            "text_offset": offsets,
        }

    @staticmethod
    def text_len(part: dict) -> int:
        tokens = part.get("tokens") or [e["token"] for e in part.get("content", [])]
        return sum(len(t) for t in tokens)
