"""tensorrt_llm_bls's draft-target rounds (pipeline/triton_models/draft_target.py) against
models made of plain functions: the output is the target's own greedy output, whatever the draft
proposes, and generation stops where the target stops."""

import numpy as np
import pytest

from pipeline.triton_models.draft_target import (
    DraftTarget,
    round_inputs,
    speculate,
    stop_sequences,
)

END = 0


def target_next(seq: list[int]) -> int:
    return (sum(seq) * 7 + len(seq)) % 50 + 1  # never END


def greedy(prompt: list[int], n: int, next_token=target_next) -> list[int]:
    seq = list(prompt)
    for _ in range(n):
        seq.append(next_token(seq))
    return seq[len(prompt) :]


def target_model(next_token=target_next, end_at: int | None = None, prompt_len: int = 3):
    """The tensorrtllm backend's target with draft_input_ids: the drafts it agrees with, then its
    own token; it ends (the end id left out of its output) at generated position end_at."""

    def target(seq: list[int], drafts: list[int]) -> list[int]:
        out = []
        for draft in [*drafts, None]:
            if end_at is not None and len(seq) + len(out) - prompt_len == end_at:
                return out
            token = next_token(seq + out)
            out.append(token)
            if token != draft:
                return out
        return out

    return target


def draft_model(wrong_every: int):
    """A draft that agrees with the target except at every wrong_every-th position."""

    def draft(seq: list[int], n: int) -> list[int]:
        out = greedy(seq, n)
        return [t if (len(seq) + i) % wrong_every else t + 1 for i, t in enumerate(out)]

    return draft


@pytest.mark.parametrize("wrong_every", [1, 3, 1000])
@pytest.mark.parametrize("k", [1, 4])
def test_output_is_the_targets_greedy_output(wrong_every, k):
    prompt = [5, 6, 7]
    tokens, drafted, accepted = speculate(
        prompt, 20, k, draft_model(wrong_every), target_model(), stops=[]
    )
    assert tokens == greedy(prompt, 20)
    assert 0 <= accepted <= drafted
    if wrong_every == 1:
        assert accepted == 0  # every draft differs
    if wrong_every == 1000:
        assert accepted == drafted > 0  # every draft kept: k + 1 tokens a round


def test_max_tokens_bounds_the_drafts_of_the_last_round():
    asked = []

    def draft(seq, n):
        asked.append(n)
        return greedy(seq, n)

    tokens, _, _ = speculate([1, 2], 6, 4, draft, target_model(prompt_len=2), stops=[])
    assert len(tokens) == 6 and asked == [4]  # 4 drafts + the target's token, then 1 left: none


def test_the_target_ending_inside_its_drafts_ends_generation():
    prompt = [5, 6, 7]
    tokens, _, _ = speculate(
        prompt, 30, 4, draft_model(1000), target_model(end_at=6), stops=[], end_id=END
    )
    assert tokens == greedy(prompt, 6)


def test_an_end_id_in_the_targets_output_ends_generation():
    def target(seq, drafts):
        return [9, END, 9]

    tokens, _, _ = speculate([1], 30, 2, lambda s, n: [9] * n, target, stops=[], end_id=END)
    assert tokens == [9]


def test_a_stop_word_at_the_targets_own_token_ends_generation():
    prompt = [5, 6, 7]
    expected = greedy(prompt, 12)
    stop = expected[4:6]
    tokens, _, _ = speculate(prompt, 12, 1, draft_model(1000), target_model(), stops=[stop])
    assert tokens == expected[:6]


def test_stop_sequences_reads_preprocessings_stop_words_layout():
    # [1, 2, n]: ids end to end, then each word's end offset, -1 padded
    layout = np.array([[[11, 12, 13, -1], [2, 3, -1, -1]]], np.int32)
    assert stop_sequences(layout) == [[11, 12], [13]]
    assert stop_sequences(np.zeros((1, 2, 0), np.int32)) == []
    assert stop_sequences(None) == []


def test_round_inputs_replace_what_a_round_sets():
    base = {
        "input_ids": np.array([[1, 2]], np.int32),
        "input_lengths": np.array([[2]], np.int32),
        "request_output_len": np.array([[64]], np.int32),
        "streaming": np.array([[True]]),
        "min_tokens": np.array([[10]], np.int32),
        "temperature": np.array([[0.0]], np.float32),
    }
    drafting = round_inputs(base, [1, 2, 3], 4, None)
    assert drafting["input_ids"].tolist() == [[1, 2, 3]]
    assert drafting["input_lengths"].tolist() == [[3]]
    assert drafting["request_output_len"].tolist() == [[4]]
    assert drafting["min_tokens"].tolist() == [[4]]  # the draft does not stop early
    assert "draft_input_ids" not in drafting and "streaming" not in drafting
    assert drafting["exclude_input_in_output"].tolist() == [[True]]
    assert drafting["temperature"] is base["temperature"]  # the request's sampling
    verifying = round_inputs(base, [1, 2, 3], 3, [7, 8])
    assert verifying["draft_input_ids"].tolist() == [[7, 8]]
    assert verifying["request_output_len"].tolist() == [[3]]
    assert "min_tokens" not in verifying
    assert "draft_input_ids" not in round_inputs(base, [1, 2, 3], 1, [])


def test_num_drafts_default_request_and_limit():
    rounds = DraftTarget("tensorrt_llm_draft", "tensorrt_llm", 4, 6)
    assert rounds.num_drafts(None) == 4
    assert rounds.num_drafts(np.array([0], np.int32)) == 0  # the request opts out
    assert rounds.num_drafts(np.array([[6]], np.int32)) == 6
    with pytest.raises(ValueError, match="num_draft_tokens=7: .* 0 to 6"):
        rounds.num_drafts(np.array([7], np.int32))


def test_serve_sends_draft_then_target_requests_and_counts():
    sent = []
    target = target_model(prompt_len=2)

    def send(model, inputs):
        sent.append((model, inputs))
        seq = inputs["input_ids"].reshape(-1).tolist()
        n = int(inputs["request_output_len"].reshape(-1)[0])
        if model == "draft":
            return greedy(seq, n)
        drafts = inputs.get("draft_input_ids", np.zeros((1, 0), np.int32)).reshape(-1).tolist()
        return target(seq, drafts)

    base = {
        "input_ids": np.array([[1, 2]], np.int32),
        "input_lengths": np.array([[2]], np.int32),
        "request_output_len": np.array([[9]], np.int32),
        "end_id": np.array([[END]], np.int32),
    }
    tokens, counts = DraftTarget("draft", "target", 3, 4).serve(base, 3, send)
    assert tokens == greedy([1, 2], 9)
    assert [model for model, _ in sent[:2]] == ["draft", "target"]
    assert counts["total_draft_tokens"].tolist() == [[6]]  # 3 + 3, then 1 token left: none
    assert counts["total_accepted_draft_tokens"].tolist() == [[6]]
    assert counts["acceptance_rate"].tolist() == [[1.0]]
