"""A CPU engine's KV cache: every sequence at its longest when the host holds it, else what half
of the available memory holds, shared by the ranks on the host."""

import pytest

from pipeline.engine.execution.host_kv_budget import cpu_num_kv_blocks, host_kv_bytes
from pipeline.errors import ConfigError

GIB = 2**30


def test_a_cache_that_fits_is_every_sequence_at_its_longest():
    # 8 sequences x 16 blocks of 1 MiB: 128 MiB, far below half of 20 GiB
    assert cpu_num_kv_blocks(2**20, 8, 16, 1, 0.9, available=20 * GIB) == 128


def test_a_cache_the_host_cannot_hold_is_capped_by_available_memory():
    # the study's engine on a 24 GB host: 512 sequences x 64 blocks of 1.4 MiB = 45 GiB wanted
    block = 1_474_560
    blocks = cpu_num_kv_blocks(block, 512, 64, 1, 0.9, available=22 * GIB)
    assert blocks == int(11 * GIB * 0.9) // block
    assert blocks * block <= 0.5 * 22 * GIB


def test_ranks_on_the_host_share_the_budget():
    one = host_kv_bytes(1, 0.9, available=22 * GIB)
    assert host_kv_bytes(2, 0.9, available=22 * GIB) == one // 2


def test_a_small_host_keeps_a_headroom():
    # 3 GiB available: half would leave 1.5 GiB, the 2 GiB headroom leaves 1 GiB
    assert host_kv_bytes(1, 1.0, available=3 * GIB) == 1 * GIB
    assert host_kv_bytes(1, 1.0, available=GIB) == 0


def test_a_host_that_cannot_hold_one_sequence_is_an_error_that_names_the_fix():
    with pytest.raises(ConfigError, match="fewer than one sequence.*num_kv_blocks"):
        cpu_num_kv_blocks(GIB, 8, 16, 1, 0.9, available=4 * GIB)
