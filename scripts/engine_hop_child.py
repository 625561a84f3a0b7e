"""The engine process for bench_engine_hop --stub-forward: the served engine process
(pipeline.engine.core.engine_process) with the model's forward returning fixed logits, so its
steps are the host's work alone and come as fast as a GPU's for a small model: the hop to the
stub, not the CPU's matmuls, is what the benchmark loads. The probe (fixed logits cannot match
the build's) is skipped. engine_hop_stub.py starts it in place of the interpreter:
`engine_hop_child.py -m pipeline.engine.core.engine_process FD [NAME]`."""

import logging
import os
import sys
from multiprocessing.connection import Connection

import torch

from pipeline.engine.core import engine_probe, engine_process
from pipeline.engine.core.llm_engine import LLMEngine
from scripts.bench_host_step import stub_forward


def stubbed(engine):
    stub_forward(engine)
    return engine


def main() -> None:
    torch.set_num_threads(1)  # the stubbed forward leaves nothing to parallelize
    # the child imports these when it starts (engine_process._child_main): patched at the source
    load = LLMEngine.from_engine_dir
    LLMEngine.from_engine_dir = staticmethod(lambda *args, **kwargs: stubbed(load(*args, **kwargs)))
    engine_probe.check_probe = lambda engine, engine_dir: None
    fd, *name = sys.argv[3:]
    engine_process._child_main(Connection(int(fd)), name[0] if name else None)
    logging.shutdown()
    os._exit(0)  # as the engine process exits: no interpreter teardown


if __name__ == "__main__":
    main()
