"""Keep Python's cyclic garbage collector off what a serving process loads once.

After load a process tracks several hundred thousand objects (torch, transformers, the model's
modules, the tokenizer) that live as long as it does, and every full collection walks all of
them, a pause of a hundred milliseconds or more on whichever thread allocated last (the engine
thread, mostly), several times a run. `gc.freeze()` moves them to a generation no collection
visits; objects made later are collected as before (docs/design.md, "The heap").

For processes that serve, not for library code: a reference cycle among frozen objects is never
freed, so whoever frees a frozen engine within a process unfreezes first (`thaw`).
"""

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def freeze_loaded() -> None:
    """Exempt every object alive now from garbage collection (collect what is garbage first)."""
    gc.collect()
    gc.freeze()


def thaw() -> None:
    """Undo freeze_loaded before freeing what it froze, so its cycles can be collected."""
    gc.unfreeze()


@contextmanager
def frozen() -> Iterator[None]:
    """freeze_loaded() for a block that frees what it froze after it (a bench that makes and
    closes engines in one process): thawed on the way out, however the block ends."""
    freeze_loaded()
    try:
        yield
    finally:
        thaw()
