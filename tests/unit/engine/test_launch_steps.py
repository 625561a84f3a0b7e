"""How many steps a launch runs when num_scheduler_steps is unset, from a decode step's GPU time."""

import pytest

from pipeline.engine.model_runner import MAX_AUTO_SCHEDULER_STEPS, steps_to_fill_launch


@pytest.mark.parametrize(
    ("step_ms", "steps"),
    [
        (1.18, 3),  # SmolLM2 shape at batch 256 on an H100, stop 22
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
