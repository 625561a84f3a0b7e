import pytest

from pipeline.engine.scheduling.sequence import Sequence
from pipeline.request.sampling_params import SamplingParams


def seq(**params) -> Sequence:
    return Sequence("r", [1, 2, 3], SamplingParams(**params), eos_token_ids=(0,))


def test_eos_stops_and_is_not_kept():
    s = seq(max_tokens=5)
    assert s.append_token(9) is None
    assert s.append_token(0) == "stop"
    assert s.completion_token_ids == [9]


def test_ignore_eos_and_custom_end_id():
    s = seq(max_tokens=5, ignore_eos=True)
    assert s.append_token(0) is None and s.completion_token_ids == [0]
    s = seq(max_tokens=5, end_id=9)
    assert s.append_token(0) is None
    assert s.append_token(9) == "stop"


def test_stop_token_and_stop_sequence_are_kept():
    s = seq(max_tokens=9, stop_token_ids=[4])
    assert s.append_token(4) == "stop" and s.completion_token_ids == [4]
    s = seq(max_tokens=9, stop_sequences=[[5, 6]])
    assert s.append_token(6) is None  # 6 alone is not the stop sequence
    assert s.append_token(5) is None
    assert s.append_token(6) == "stop" and s.completion_token_ids == [6, 5, 6]


def test_stop_sequence_must_lie_in_the_generated_tokens():
    s = seq(max_tokens=9, stop_sequences=[[3, 4]])  # the prompt ends with 3
    assert s.append_token(4) is None


def test_max_tokens_gives_length():
    s = seq(max_tokens=2)
    assert s.append_token(7) is None
    assert s.append_token(7) == "length"


@pytest.mark.parametrize(
    "params, launches",
    [
        ({"max_tokens": 9}, [[7, 8, 9], [0, 5, 6]]),  # eos mid-launch: not kept, the rest dropped
        ({"max_tokens": 9, "ignore_eos": True}, [[0, 0, 0], [0]]),
        ({"max_tokens": 4}, [[7, 8, 9], [5, 6, 7]]),  # max_tokens inside the second launch
        ({"max_tokens": 3}, [[7, 8, 9]]),  # ... at the launch's last token
        ({"max_tokens": 9, "stop_token_ids": [8]}, [[7, 8, 9]]),
        ({"max_tokens": 9, "stop_sequences": [[8, 9]]}, [[7, 8], [9, 5]]),
        ({"max_tokens": 9, "end_id": 5}, [[0, 5, 6]]),
    ],
)
def test_a_launchs_tokens_append_as_one_token_at_a_time(params, launches):
    def one_at_a_time(s: Sequence, tokens: list[int]) -> tuple[int, str | None]:
        for num_taken, token in enumerate(tokens, 1):
            reason = s.append_token(token)
            if reason is not None:
                return num_taken, reason
        return len(tokens), None

    batched, single = seq(**params), seq(**params)
    for tokens in launches:
        num_taken, reason = batched.append_tokens(tokens)
        assert (num_taken, reason) == one_at_a_time(single, tokens)
        assert batched.token_ids == single.token_ids
        if reason is not None:
            break
    assert reason is not None or batched.num_completion_tokens < params["max_tokens"]
    assert batched.first_token_time_s is not None


def test_banned_tokens_follow_bad_sequence_prefixes():
    s = seq(bad_sequences=[[8], [3, 9], [2, 4, 5]])
    assert sorted(s.banned_token_ids()) == [8, 9]  # the prompt ends with 3
    s.append_token(7)
    assert s.banned_token_ids() == [8]


def test_sampling_params_validate_and_normalise():
    params = SamplingParams(stop_sequences=[[1, 2]], stop_token_ids=[3])
    assert params.stop_sequences == ((1, 2),) and params.stop_token_ids == (3,)
    for bad in (
        {"max_tokens": 0},
        {"temperature": -1},
        {"top_k": -1},
        {"top_p": 0.0},
        {"stop_sequences": [[]]},
    ):
        with pytest.raises(ValueError, match="SamplingParams"):
            SamplingParams(**bad)
