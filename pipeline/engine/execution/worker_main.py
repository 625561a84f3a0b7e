"""A worker rank (1..N-1) of a multi-rank engine: load this rank's weights, build its model runner
in step with the other ranks, then run the launches rank 0 sends until it says stop.

Its start-up spec (the EngineConfig, rank, world size, store port, torch threads) comes pickled
on stdin, once; the end of stdin means rank 0 is gone. An error is put in the store before the
worker exits, so rank 0 can say what went wrong. SIGUSR1 prints its Python stacks."""

import faulthandler
import logging
import os
import pickle
import signal
import sys
import threading
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

from pipeline.engine.parallel.mapping import rank_device
from pipeline.engine.parallel.workers import error_key


def _exit_with_parent() -> None:
    """Rank 0 keeps this process's stdin open; end-of-file means it is gone."""
    sys.stdin.buffer.read()
    os._exit(1)


def main() -> None:
    spec = pickle.load(sys.stdin.buffer)
    rank = spec["rank"]
    threading.Thread(target=_exit_with_parent, name="parent-watch", daemon=True).start()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(
        level=logging.INFO, format=f"[engine rank {rank}] %(levelname)s %(message)s"
    )
    torch.set_num_threads(spec["num_threads"])
    config = spec["config"]
    store = dist.TCPStore(
        "127.0.0.1",
        spec["port"],
        spec["world_size"],
        is_master=False,
        timeout=timedelta(seconds=config.collective_timeout_s),
    )
    try:
        from pipeline.engine.execution.model_runner import ModelRunner
        from pipeline.engine.execution.weights import load_rank_weights

        device = rank_device(config.device, rank)
        if device.type == "cuda":  # the tuned kernel configs rank 0 installed, in this process
            from pipeline.engine.kernels.tuned_configs import install_engine_configs

            install_engine_configs(config.engine_dir, device.index or 0)
        weights = load_rank_weights(config.engine_dir, rank, device, config.weights_loader)
        runner = ModelRunner(config, weights, rank=rank, store=store)
        del weights
        runner.follow()
        runner.close()  # leaves the process groups beside rank 0
    except BaseException:  # noqa: BLE001 - rank 0 reports it
        text = traceback.format_exc()
        logging.getLogger(__name__).error("%s", text)
        try:
            store.set(error_key(rank), text.strip().splitlines()[-1])
        except Exception:  # noqa: BLE001 - the store went with rank 0
            pass
        logging.shutdown()
        os._exit(1)
    logging.shutdown()
    os._exit(0)  # no interpreter teardown (CUDA's takes seconds)


if __name__ == "__main__":
    main()
