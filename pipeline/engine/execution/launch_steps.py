"""How many steps a launch runs when num_scheduler_steps is unset.

A launch covers AUTO_LAUNCH_GPU_MS of GPU time: enough to hide the host's part of a launch
(longer beside a server's processes), no more, since a longer launch holds back requests that
arrive meanwhile. Tuned on the H100 with SmolLM2 served (3 steps a launch beat 2 and 4;
docs/design.md, "Launches: several steps each"). Pipeline-parallel engines take the most: their
stages' pipeline drains at the end of each launch (stage 0 waits for the last micro-batch's
logits before the next launch's first forward), and a 1-step launch kept each of 2 stages idle a
third of the time."""

import math
from collections.abc import Callable

AUTO_LAUNCH_GPU_MS = 2.8
MAX_AUTO_SCHEDULER_STEPS = 8


def steps_to_fill_launch(step_ms: float) -> int:
    """The fewest decode steps of step_ms each that cover AUTO_LAUNCH_GPU_MS (at most
    MAX_AUTO_SCHEDULER_STEPS)."""
    return min(MAX_AUTO_SCHEDULER_STEPS, math.ceil(AUTO_LAUNCH_GPU_MS / step_ms))


def launch_steps(
    configured: int | None, pp_size: int, decode_ms: Callable[[], float | None]
) -> tuple[int, int]:
    """(steps a launch, the most the engine may grow it to while its host paces the device).
    configured: num_scheduler_steps (None: auto); decode_ms: measures a decode step's GPU time
    at the largest batch (None without CUDA graphs: 1 step, the host syncs every step anyway),
    called only when the count depends on it."""
    if configured is not None:
        return configured, configured
    if pp_size > 1:
        return MAX_AUTO_SCHEDULER_STEPS, MAX_AUTO_SCHEDULER_STEPS
    step_ms = decode_ms()
    if step_ms is None:
        return 1, 1
    steps = steps_to_fill_launch(step_ms)
    return steps, min(MAX_AUTO_SCHEDULER_STEPS, 2 * steps)
