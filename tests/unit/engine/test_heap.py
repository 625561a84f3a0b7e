import gc

import pytest

from pipeline.engine.core.heap import freeze_loaded, frozen, thaw


def test_freeze_exempts_what_is_alive_and_thaw_gives_it_back():
    kept = [[i] for i in range(100)]  # tracked containers alive at the freeze
    freeze_loaded()
    try:
        assert gc.get_freeze_count() >= len(kept)
    finally:
        thaw()
    assert gc.get_freeze_count() == 0


def test_a_frozen_block_thaws_however_it_ends():
    kept = [[i] for i in range(100)]
    with pytest.raises(RuntimeError), frozen():
        assert gc.get_freeze_count() >= len(kept)
        raise RuntimeError("a failed run")
    assert gc.get_freeze_count() == 0
