"""Named ranges around the engine's host phases, for torch.profiler (scripts.profile_engine
splits a step's host time by them).

A record_function costs ~7 us even when no profiler runs, and a launch enters eight of them on
the host path that paces the GPU; outside a profile a phase is a shared no-op instead."""

import contextlib

import torch
from torch.profiler import record_function

_NO_RANGE = contextlib.nullcontext()


def phase(name: str) -> contextlib.AbstractContextManager:
    return record_function(name) if torch.autograd._profiler_enabled() else _NO_RANGE
