"""How many steps a launch runs when num_scheduler_steps is unset, from a decode step's GPU time."""

import pytest

from pipeline.engine.execution.launch_steps import (
    MAX_AUTO_SCHEDULER_STEPS,
    launch_steps,
    steps_to_fill_launch,
)


@pytest.mark.parametrize(
    ("step_ms", "steps"),
    [
        (1.18, 3),  # SmolLM2 shape at batch 256 on an H100
        (1.05, 3),  # the same with rotary fused into the KV store
        (0.94, 3),
        (0.93, 4),
        (1.4, 2),
        (2.5, 2),
        (2.8, 1),
        (7.05, 1),  # Llama-3.1-8B shape at batch 128: the step covers the host alone
        (40.0, 1),
        (0.05, MAX_AUTO_SCHEDULER_STEPS),
    ],
)
def test_a_launch_covers_2_8_ms_of_gpu_time_with_the_fewest_steps(step_ms, steps):
    assert steps_to_fill_launch(step_ms) == steps


@pytest.mark.parametrize(
    ("configured", "decode_ms", "pp_size", "expected"),
    [
        (5, 0.5, 1, (5, 5)),  # set: used as is, never grown
        (2, None, 2, (2, 2)),
        (None, None, 1, (1, 1)),  # no CUDA graphs: the host syncs every step
        (None, 1.0, 1, (3, 6)),  # auto: may grow to twice as many
        (None, 0.05, 1, (MAX_AUTO_SCHEDULER_STEPS, MAX_AUTO_SCHEDULER_STEPS)),
        # pipeline parallel: the most, so the stages' pipeline drains once per 8 steps
        (None, 7.0, 2, (MAX_AUTO_SCHEDULER_STEPS, MAX_AUTO_SCHEDULER_STEPS)),
        (None, None, 2, (MAX_AUTO_SCHEDULER_STEPS, MAX_AUTO_SCHEDULER_STEPS)),
    ],
)
def test_launch_steps_and_their_ceiling(configured, decode_ms, pp_size, expected):
    measured = []

    def measure():
        measured.append(decode_ms)
        return decode_ms

    assert launch_steps(configured, pp_size, measure) == expected
    # the GPU is timed only when the count depends on it
    assert len(measured) == (configured is None and pp_size == 1)
