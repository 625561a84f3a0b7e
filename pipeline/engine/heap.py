"""Keep Python's cyclic garbage collector off what a serving process loads once.

After load a process tracks ~0.4M objects (torch, transformers, the model's modules, the
tokenizer) that live as long as it does, and every full collection walks all of them: 146-176 ms
each on this repo's 2-core CPU machine, on whichever thread allocated last (the engine thread,
mostly), several times a run. `gc.freeze()` moves them to a generation no collection visits;
objects made later are collected as before. scripts/bench_host_step.py, batch 64 / 256: host ms a
launch 0.59 / 2.64 -> 0.51 / 1.90 (lockstep) with the load frozen.

For processes that serve, not for library code: a reference cycle among frozen objects is never
freed, so whoever frees a frozen engine within a process unfreezes first (`thaw`).
"""

import gc


def freeze_loaded() -> None:
    """Exempt every object alive now from garbage collection (collect what is garbage first)."""
    gc.collect()
    gc.freeze()


def thaw() -> None:
    """Undo freeze_loaded before freeing what it froze, so its cycles can be collected."""
    gc.unfreeze()
