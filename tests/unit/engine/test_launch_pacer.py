"""The launch pacer: steps a launch follow whether the host keeps up with the device."""

from pipeline.engine.core.launch_policy import WINDOW, LaunchPacer


def run_window(pacer: LaunchPacer, wait_s: float, cycle_s: float, num_late: int = WINDOW) -> int:
    for i in range(WINDOW):
        wait = 0.0 if i < num_late else wait_s
        pacer.observe(wait, cycle_s, wait, cycle_s)  # a prep of the whole launch: no reserve
    return pacer.num_steps


def test_a_late_host_gets_more_steps_up_to_the_max():
    pacer = LaunchPacer(3, 5)
    assert [run_window(pacer, 0.0, 4e-3) for _ in range(3)] == [4, 5, 5]


def test_one_window_decides_once():
    pacer = LaunchPacer(3, 6)
    for _ in range(WINDOW - 1):
        pacer.observe(0.0, 4e-3, 0.0, 4e-3)
    assert pacer.num_steps == 3
    pacer.observe(0.0, 4e-3, 0.0, 4e-3)
    assert pacer.num_steps == 4


def test_a_few_late_launches_change_nothing():
    pacer = LaunchPacer(3, 6)
    assert run_window(pacer, 0.5e-3, 3e-3, num_late=WINDOW // 2) == 3


def test_a_host_well_ahead_gives_steps_back_down_to_the_min():
    pacer = LaunchPacer(3, 6)
    run_window(pacer, 0.0, 4e-3)
    run_window(pacer, 0.0, 4e-3)
    assert pacer.num_steps == 5
    # 5 steps of 1 ms; the host waits 2 ms a launch: 2 steps to spare
    assert run_window(pacer, 2e-3, 5e-3, num_late=0) == 4
    assert run_window(pacer, 2e-3, 4e-3, num_late=0) == 3
    assert run_window(pacer, 2e-3, 3e-3, num_late=0) == 3


def test_a_step_added_is_kept_while_the_host_is_ahead_by_less_than_it_saves():
    # 4 steps of 1 ms for a host of ~3.2 ms: the 0.8 ms wait is less than 1.5 steps
    pacer = LaunchPacer(3, 6)
    run_window(pacer, 0.0, 3.2e-3)
    assert [run_window(pacer, 0.8e-3, 4e-3, num_late=0) for _ in range(3)] == [4, 4, 4]


def test_a_fixed_count_never_moves():
    pacer = LaunchPacer(2, 2)
    assert run_window(pacer, 0.0, 4e-3) == 2


def run_reserve_window(
    pacer: LaunchPacer, prep_s: list[float], num_late: int = 0, cycle_s: float = 3e-3
) -> int:
    """A window of launches of 1 ms steps (3 a launch by default) whose host waited 1 ms in
    all, 0.5 ms of it for the tokens (none for the first num_late), with these preps (cycled)."""
    for i in range(WINDOW):
        sync_wait_s = 0.0 if i < num_late else 0.5e-3
        pacer.observe(1e-3, cycle_s, sync_wait_s, prep_s[i % len(prep_s)])
    return pacer.num_reserve_steps


def test_the_reserve_starts_at_the_whole_launch_and_covers_the_hosts_prep():
    pacer = LaunchPacer(3, 3)
    assert pacer.num_reserve_steps == 3
    assert run_reserve_window(pacer, [0.5e-3]) == 1  # 1.25 x 0.5 ms: one 1 ms step
    assert run_reserve_window(pacer, [1.5e-3]) == 2
    assert run_reserve_window(pacer, [9e-3]) == 3  # never more than the launch
    assert pacer.num_steps == 3


def test_the_reserve_follows_the_90th_percentile_prep():
    pacer = LaunchPacer(3, 3)
    outliers = [2.5e-3] * 3  # 3 of 32: above the 90th percentile
    assert run_reserve_window(pacer, [0.5e-3] * 29 + outliers) == 1
    assert run_reserve_window(pacer, [0.5e-3] * 24 + [2.5e-3] * 8) == 3


def test_late_launches_widen_the_reserve_before_adding_steps():
    pacer = LaunchPacer(3, 6)
    assert run_reserve_window(pacer, [0.5e-3]) == 1
    # 4 of 32 late: the device idled before the next launch was queued
    assert run_reserve_window(pacer, [0.5e-3], num_late=4) == 2
    assert run_reserve_window(pacer, [0.5e-3], num_late=WINDOW) == 3
    assert pacer.num_steps == 3
    # with the whole launch in reserve, a mostly late host gets a step (reserved too)
    assert run_reserve_window(pacer, [2.9e-3], num_late=WINDOW) == 4
    assert pacer.num_steps == 4


def test_a_prep_as_long_as_the_launch_schedules_at_once():
    pacer = LaunchPacer(3, 3)
    run_reserve_window(pacer, [0.5e-3])
    for _ in range(WINDOW):
        pacer.observe(1e-3, 3e-3, 1e-3, 3e-3)
    assert pacer.num_reserve_steps == 3
