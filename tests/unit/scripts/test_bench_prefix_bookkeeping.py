"""scripts.bench_prefix_bookkeeping on a few requests: every phase timed, off and on, and a
compared prefix_cache.py loaded beside this tree's."""

import json

from pipeline.engine.scheduling import prefix_cache
from scripts.bench_prefix_bookkeeping import PHASES, main


def test_the_block_managers_calls_are_timed_phase_by_phase_off_and_on(capsys):
    argv = ["--requests", "8", "--prompt-len", "40", "--output-len", "20", "--repeats", "1"]
    assert main([*argv, "--block-size", "16", "--compare", prefix_cache.__file__]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    result = json.loads(line)
    compared = f"on ({prefix_cache.__file__})"
    assert set(result) == {"block_size", "off", "on", compared}
    for name in ("off", "on", compared):
        assert set(PHASES) <= set(result[name]) and result[name]["total"] > 0
    assert "added_us_a_request" in result["on"] and "added_us_a_request" not in result["off"]
