"""Draft-target speculative decoding as tensorrt_llm_bls drives it (backend=trtllm): rounds of k
draft tokens from `tensorrt_llm_draft`, checked by one `tensorrt_llm` request that carries them as
draft_input_ids and returns the drafts it kept plus its own next token.

The rounds follow upstream's BLS (TRT-LLM `triton_backend/all_models/inflight_batcher_llm/
tensorrt_llm_bls/1/lib/decode.py`, `Decoder._spec_generate`): a round drafts
min(k, tokens left - 1) tokens (the draft's min_tokens set to them, so it does not stop early),
the target's request_output_len is the drafts + 1; generation stops at max_tokens, when the
target returns no more than the drafts it agreed with (it stopped: end id or a stop word), or
when the tokens end with a stop word. Each round's requests carry the whole sequence so far; the
engines' KV cache reuse (enable_kv_cache_reuse) keeps that from recomputing it.

No imports but numpy: the deploy stage copies it beside the BLS, as bls_names.py.
"""

from collections.abc import Callable

import numpy as np

# the LLM model's per-request inputs a round sets itself (the client's values do not apply to a
# round's request: lengths, streaming, logits)
ROUND_INPUTS = (
    "input_ids",
    "input_lengths",
    "request_output_len",
    "min_tokens",
    "streaming",
    "exclude_input_in_output",
    "return_context_logits",
    "return_generation_logits",
    "draft_input_ids",
)


def stop_sequences(stop_words_list: np.ndarray | None) -> list[list[int]]:
    """preprocessing's STOP_WORDS_IDS ([1, 2, n]: the words' ids end to end, then each word's
    end offset, -1 padded) as token lists."""
    if stop_words_list is None or stop_words_list.size == 0:
        return []
    ids, ends = stop_words_list.reshape(2, -1)
    words, start = [], 0
    for end in ends:
        if end < 0:
            break
        words.append([int(t) for t in ids[start:end]])
        start = int(end)
    return [w for w in words if w]


def ends_with_stop(tokens: list[int], stops: list[list[int]]) -> bool:
    return any(len(tokens) >= len(s) and tokens[-len(s) :] == s for s in stops)


def round_inputs(
    base: dict[str, np.ndarray], tokens: list[int], output_len: int, drafts: list[int] | None
) -> dict[str, np.ndarray]:
    """One round's LLM request inputs: the request's own (sampling, stop words, ...) with the
    sequence so far as the prompt; drafts None: the draft model's request."""
    prompt = np.array([tokens], np.int32)
    inputs = {name: value for name, value in base.items() if name not in ROUND_INPUTS}
    inputs |= {
        "input_ids": prompt,
        "input_lengths": np.array([[prompt.shape[1]]], np.int32),
        "request_output_len": np.array([[output_len]], np.int32),
        "exclude_input_in_output": np.array([[True]]),
    }
    if drafts is None:
        inputs["min_tokens"] = np.array([[output_len]], np.int32)
    elif drafts:
        inputs["draft_input_ids"] = np.array([drafts], np.int32)
    return inputs


def speculate(
    prompt: list[int],
    max_tokens: int,
    num_draft_tokens: int,
    draft: Callable[[list[int], int], list[int]],
    target: Callable[[list[int], list[int]], list[int]],
    stops: list[list[int]],
    end_id: int | None = None,
) -> tuple[list[int], int, int]:
    """The generated tokens, the drafts sent and the drafts kept. draft(sequence, n): the draft
    model's n tokens after sequence; target(sequence, drafts): the target's tokens after it
    (an end_id among them ends the output, left out)."""
    tokens: list[int] = []
    num_drafted = num_accepted = 0
    while len(tokens) < max_tokens:
        n = min(num_draft_tokens, max_tokens - len(tokens) - 1)
        drafts = draft(prompt + tokens, n)[:n] if n > 0 else []
        new = target(prompt + tokens, drafts)[: len(drafts) + 1]
        ended = end_id is not None and end_id in new
        if ended:
            new = new[: new.index(end_id)]
        kept = 0
        while kept < min(len(drafts), len(new)) and new[kept] == drafts[kept]:
            kept += 1
        num_drafted += len(drafts)
        num_accepted += kept
        tokens += new
        if ended or len(new) == kept or ends_with_stop(tokens, stops):
            break  # the target stopped inside the drafts it agreed with (or gave nothing)
    return tokens[:max_tokens], num_drafted, num_accepted


class DraftTarget:
    """The BLS's draft-target settings (its config.pbtxt parameters) and its rounds."""

    def __init__(
        self, draft_model: str, target_model: str, num_draft_tokens: int, max_draft_len: int
    ):
        self.draft_model, self.target_model = draft_model, target_model
        self.num_draft_tokens, self.max_draft_len = num_draft_tokens, max_draft_len

    def num_drafts(self, sent: np.ndarray | None) -> int:
        """The request's num_draft_tokens (0: no speculation), else the deployed default;
        ValueError past the target engine's max_draft_len."""
        k = self.num_draft_tokens if sent is None or not sent.size else int(sent.reshape(-1)[0])
        if not 0 <= k <= self.max_draft_len:
            raise ValueError(
                f"num_draft_tokens={k}: the target engine verifies 0 to {self.max_draft_len} "
                f"drafts a round (its max_draft_len); send one of those"
            )
        return k

    def serve(
        self,
        base: dict[str, np.ndarray],
        num_drafts: int,
        send: Callable[[str, dict[str, np.ndarray]], list[int]],
    ) -> tuple[list[int], dict[str, np.ndarray]]:
        """A request's tokens by rounds (base: its preprocessed LLM inputs; send(model, inputs):
        one request's generated tokens) and its draft counts as the LLM model's outputs."""
        end = base.get("end_id")
        tokens, drafted, accepted = speculate(
            base["input_ids"].reshape(-1).tolist(),
            int(base["request_output_len"].reshape(-1)[0]),
            num_drafts,
            lambda seq, n: send(self.draft_model, round_inputs(base, seq, n, None)),
            lambda seq, drafts: send(
                self.target_model, round_inputs(base, seq, len(drafts) + 1, drafts)
            ),
            stop_sequences(base.get("stop_words_list")),
            None if end is None else int(end.reshape(-1)[0]),
        )
        counts = {
            "total_draft_tokens": np.array([[drafted]], np.int32),
            "total_accepted_draft_tokens": np.array([[accepted]], np.int32),
            "acceptance_rate": np.array([[accepted / drafted if drafted else 0.0]], np.float32),
        }
        return tokens, counts
