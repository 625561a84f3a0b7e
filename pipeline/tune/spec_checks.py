"""Every problem with the tune settings at once, before anything is built or measured."""

from pipeline.errors import ConfigError

SPACES = ("serving", "kernels", "instructions")
STRATEGIES = ("anneal", "random", "autotune_list")


def check_tune_spec(tune) -> None:
    a, problems = tune.anneal, []
    if tune.space not in SPACES:
        problems.append(f"tune.space={tune.space!r} (use one of {SPACES})")
    if tune.kernels.strategy not in STRATEGIES:
        problems.append(f"tune.kernels.strategy={tune.kernels.strategy!r} (use {STRATEGIES})")
    if a.max_trials < 1:
        problems.append(f"tune.anneal.max_trials={a.max_trials} (must be >= 1)")
    if a.repeats < 2:  # one measurement says nothing about the noise
        problems.append(f"tune.anneal.repeats={a.repeats} (must be >= 2: the noise estimate)")
    if a.max_seconds <= 0:
        problems.append(f"tune.anneal.max_seconds={a.max_seconds} (must be > 0)")
    if not 0 < a.cooling <= 1:
        problems.append(f"tune.anneal.cooling={a.cooling} (must be in (0, 1])")
    if not 0 < a.min_temperature <= a.initial_temperature:
        problems.append(
            f"tune.anneal.min_temperature={a.min_temperature} (must be in (0, "
            f"initial_temperature={a.initial_temperature}])"
        )
    if not 0.5 <= a.confidence < 1:
        problems.append(f"tune.anneal.confidence={a.confidence} (must be in [0.5, 1))")
    if a.min_gain < 0:
        problems.append(f"tune.anneal.min_gain={a.min_gain} (must be >= 0)")
    s = tune.serving
    for key in ("ttft_p99_ms", "itl_p99_ms"):
        if getattr(s, key) <= 0:
            problems.append(f"tune.serving.{key}={getattr(s, key)} (must be > 0)")
    for key, least in (
        ("max_batch_size", 1),
        ("max_num_tokens", 1),
        ("num_kv_blocks", 1),
        ("num_scheduler_steps", 0),  # 0 = auto
        ("instances", 0),  # 0 = auto
        ("max_response_rate", 0),  # 0 = no limit
    ):
        if any(v < least for v in getattr(s, key)):
            problems.append(f"tune.serving.{key}={list(getattr(s, key))} (each >= {least})")
    if problems:
        raise ConfigError("tune: " + "; ".join(problems) + " (fix conf/tune or the override)")
