"""The engine's summed times in stats() and their means between two stats(): ms a launch (the
launch timer's totals) and ms a finished request. Torch-free: a Triton stub reads them."""

TOTALS = ("host_s", "host_cpu_s", "gpu_wait_s", "away_s")  # summed over launches, in stats()


def mean_ms(
    after: dict, before: dict | None, count: str, totals: tuple[str, ...], suffix: str = "_ms"
) -> dict[str, float]:
    """Summed seconds in two engine stats() -> ms per counted item between them (before: None
    for since start); "<total>_s" becomes "<total><suffix>"."""
    before = before or {}
    num = max(1, after[count] - before.get(count, 0))
    return {
        key.removesuffix("_s") + suffix: 1e3 * (after[key] - before.get(key, 0.0)) / num
        for key in totals
    }


def ms_per_launch(after: dict, before: dict | None = None) -> dict[str, float]:
    """The timer's totals in two engine stats() (before: None for since start) -> ms a launch."""
    return mean_ms(after, before, "num_launches", TOTALS, "_ms_per_launch")


def request_ms(after: dict, before: dict | None = None) -> dict[str, float]:
    """Finished requests' mean ms from arrival in the engine (queued until first admitted, first
    token, final token on the host), between two stats() (before: None for since start)."""
    keys = ("request_queue_s", "request_first_token_s", "request_final_s")
    return mean_ms(after, before, "num_finished_requests", keys)
