"""How many KV blocks a CPU engine's rank takes: what every sequence needs at its longest, capped
by the host memory available now (psutil), as a GPU engine sizes its cache from free GPU memory.

Host memory is shared with the server, its clients, the tokenizers and whatever else runs on the
host, and every rank of a CPU engine runs on this host, sizing its cache at the same moment (after
the weights barrier): so a rank takes its share of half of what is available, less a headroom for
a step's activations and logits."""

import psutil

from pipeline.errors import ConfigError

MIN_HEADROOM_BYTES = 2 * 2**30  # a step's activations and logits, the process's own growth
HOST_SHARE = 0.5  # of the available memory, the most the engine's KV caches take together


def host_kv_bytes(num_ranks_here: int, fraction: float, available: int | None = None) -> int:
    """The bytes one of num_ranks_here ranks may give its KV cache. available: bytes the host
    has available (None: psutil's reading now)."""
    if available is None:
        available = psutil.virtual_memory().available
    usable = min(available * HOST_SHARE, available - MIN_HEADROOM_BYTES) * fraction
    return max(int(usable // num_ranks_here), 0)


def cpu_num_kv_blocks(
    block_bytes: int,
    max_batch_size: int,
    blocks_per_seq: int,
    num_ranks_here: int,
    fraction: float,
    available: int | None = None,
) -> int:
    """Blocks for max_batch_size sequences at their longest, or what the host's memory holds
    (never fewer than one longest sequence's: a cache that cannot hold one is an error)."""
    wanted = max_batch_size * blocks_per_seq
    budget = host_kv_bytes(num_ranks_here, fraction, available)
    num_blocks = min(wanted, budget // block_bytes)
    if num_blocks < blocks_per_seq:
        raise ConfigError(
            f"engine: host memory holds {num_blocks} KV blocks a rank "
            f"({budget / 2**30:.2f} GiB of {num_ranks_here} rank(s)' share of the available "
            f"memory), fewer than one sequence of max_seq_len needs ({blocks_per_seq}); free "
            f"memory on this host, lower build.max_seq_len, or set num_kv_blocks"
        )
    return num_blocks
