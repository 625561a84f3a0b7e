"""How a pipeline-parallel launch splits into micro-batches."""

import pytest

from pipeline.engine.execution.launch_schedule import micro_batches, split_micro_batches


@pytest.mark.parametrize(
    ("num_tokens", "pp_size", "expected"),
    [
        (1, 2, 2),  # decode-sized: one a stage (more would re-read the weights)
        (512, 2, 2),
        (2047, 2, 2),
        (4096, 2, 4),  # prefill-sized: twice the stages, a shorter pipeline fill
        (65536, 2, 4),
        (65536, 4, 8),
    ],
)
def test_micro_batches_grow_only_for_compute_bound_launches(num_tokens, pp_size, expected):
    assert micro_batches(num_tokens, pp_size) == expected


def test_split_covers_every_sequence_once_in_order_with_about_equal_tokens():
    tokens = [1000, 24, 1000, 24, 1000, 24, 1000, 24]
    slices = split_micro_batches(tokens, 4)
    covered = [i for s in slices for i in range(len(tokens))[s]]
    assert covered == list(range(len(tokens)))
    sums = [sum(tokens[s]) for s in slices]
    assert len(slices) == 4 and max(sums) - min(sums) <= 1000


def test_split_never_makes_an_empty_micro_batch():
    assert len(split_micro_batches([5], 4)) == 1
    assert all(s.stop > s.start for s in split_micro_batches([1, 1, 1], 4))
