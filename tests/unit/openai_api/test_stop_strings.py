"""Stop strings on streamed text: cut before the first, never sent in part, held only as long as
the text could still become one."""

import pytest

from pipeline.openai_api.stop_strings import StopChecker


def stream(stops: tuple[str, ...], pieces: list[str]) -> tuple[list[str], bool]:
    checker, sent = StopChecker(stops), []
    for i, piece in enumerate(pieces):
        sent.append(checker.add(piece, is_final=i == len(pieces) - 1))
        if checker.is_stopped:
            break
    return sent, checker.is_stopped


@pytest.mark.parametrize(
    "stops,pieces,expected_text,is_stopped",
    [
        ((), ["Hello", " world"], "Hello world", False),
        (("\n",), ["Paris.", "\nThe"], "Paris.", True),
        ((" is:",), [" Paris", " is", ":", " more"], " Paris", True),  # split over pieces
        (("END",), ["abcEN", "Dxyz"], "abc", True),
        (("END",), ["abcEN", "d"], "abcENd", False),  # held "EN" goes out once it can't match
        (("ab", "b"), ["xab"], "x", True),  # the earliest stop wins
        (("xyz",), ["xy"], "xy", False),  # the final piece sends what was held
    ],
)
def test_text_ends_before_the_first_stop(stops, pieces, expected_text, is_stopped):
    sent, stopped = stream(stops, pieces)
    assert "".join(sent) == expected_text
    assert stopped == is_stopped
    for stop in stops:
        assert stop not in "".join(sent)


def test_only_a_possible_stop_prefix_is_held():
    checker = StopChecker(("STOP",))
    assert checker.add("one ST", is_final=False) == "one "
    assert checker.add("ART", is_final=False) == "START"
    assert checker.add(" S", is_final=False) == " "
    assert checker.add("TOP and", is_final=False) == ""
    assert checker.is_stopped
    assert checker.add("more", is_final=True) == ""
