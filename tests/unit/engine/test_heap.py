import gc

from pipeline.engine.core.heap import freeze_loaded, thaw


def test_freeze_exempts_what_is_alive_and_thaw_gives_it_back():
    kept = [[i] for i in range(100)]  # tracked containers alive at the freeze
    freeze_loaded()
    try:
        assert gc.get_freeze_count() >= len(kept)
    finally:
        thaw()
    assert gc.get_freeze_count() == 0
