"""The accuracy flag: a cell's probes against its batch-1 cell's, beyond noise."""

import pytest

from pipeline.specs.study import StudyAccuracy
from pipeline.study.accuracy import accuracy_flags, mcnemar_p, token_agreement
from pipeline.study.faults import Truncation


def result(correct, ppl=10.0, generated=64, requested=64, tokens=None):
    return {
        "cloze": {"correct": correct, "accuracy": sum(correct) / len(correct)},
        "ppl": ppl,
        "greedy": {
            "num_generated": generated,
            "num_requested": requested,
            "tokens": tokens or [[1, 2, 3]],
        },
    }


def test_identical_answers_are_not_flagged():
    base = result([True] * 40 + [False] * 24)
    assert accuracy_flags(base, base, StudyAccuracy()) == []


def test_a_few_flipped_answers_are_noise_and_many_are_not():
    opts = StudyAccuracy()
    base = result([True] * 40 + [False] * 24)
    # 3 right answers turn wrong, 2 wrong turn right: within noise
    noisy = result([False] * 3 + [True] * 37 + [True] * 2 + [False] * 22)
    assert accuracy_flags(base, noisy, opts) == []
    # the paper's drop, 82% -> 26% (paired): flagged with the p-value
    base = result([True] * 82 + [False] * 18)
    dropped = result([True] * 26 + [False] * 74)
    flags = accuracy_flags(base, dropped, opts)
    assert len(flags) == 1 and "cloze accuracy 26.0% vs 82.0% at batch 1" in flags[0]


def test_missing_tokens_and_a_perplexity_shift_are_flagged():
    opts = StudyAccuracy(ppl_rel_tolerance=0.01)
    base = result([True] * 10)
    assert accuracy_flags(base, result([True] * 10, ppl=10.05), opts) == []
    flags = accuracy_flags(base, result([True] * 10, ppl=10.5, generated=16), opts)
    assert flags[0] == "greedy requests returned 16 of 64 requested tokens"
    assert "perplexity 10.500 vs 10.000" in flags[1]
    # pipeline-parallel cells have no perplexity: nothing to compare, nothing flagged for it
    assert accuracy_flags(base, result([True] * 10, ppl=None), opts) == []


def test_mcnemar_is_symmetric_and_one_without_discordant_pairs():
    a, b = [True] * 10 + [False] * 10, [False] * 10 + [True] * 10
    assert mcnemar_p(a, a) == 1.0
    assert mcnemar_p(a, b) == mcnemar_p(b, a) == 1.0  # as many turn right as turn wrong
    assert mcnemar_p([True] * 8, [False] * 8) == pytest.approx(2 / 2**8)
    assert mcnemar_p([False] * 8, [True] * 8) == pytest.approx(2 / 2**8)


def test_token_agreement_counts_up_to_the_first_difference():
    assert token_agreement([[1, 2, 3, 4]], [[1, 2, 9, 4]]) == 0.5
    assert token_agreement([[1, 2], [5, 6]], [[1, 2], [5]]) == 0.75


def test_truncation_applies_from_its_batch_size_on():
    from pipeline.engine import SamplingParams

    fault = Truncation(min_batch_size=32, max_prompt_tokens=2, max_tokens=4)
    params = SamplingParams(max_tokens=16)
    assert fault(16, [1, 2, 3], params) == ([1, 2, 3], params)
    prompt, capped = fault(32, [1, 2, 3], params)
    assert prompt == [2, 3] and capped.max_tokens == 4
