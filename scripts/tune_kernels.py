"""Kernel-config tuning on the GPU in one run: simulated annealing against random search and
triton.autotune's list at the same number of measurements, the tuning cache's reuse, the engine
with and without the cache, and the SIP-style instruction search on the varlen attention kernel.

    python -m scripts.tune_kernels --out $OUT [--model llama-3.1-8b-shape] [--quant int8_wo]
        [--kernels paged_decode_attention varlen_attention] [--trials 24] [--repeats 5]

The model is a random-weight engine of a published shape (scripts.model_shapes). Every strategy
measures the default first and then `--trials - 1` candidates, each `--repeats` times. The
annealer's results fill the cache (--cache, default $OUT/kernel-tuning-cache.json); a second
pass over the same items must measure nothing. The engine runs (scripts.engine_run in a fresh
process each: batch-1 decode, then 512 x 128/128 offline) use the engine dir as built and a copy
whose kernel_configs.json holds the cache's entries. Writes tune_kernels.json, tune_kernels.md
and trace plots after each step.
"""

import argparse
import gc
import json
import multiprocessing
import shutil
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from pipeline.engine.kernels import toolchain
from pipeline.engine.kernels.toolchain import KERNEL_SOURCES
from pipeline.engine.kernels.tuned_configs import TUNED
from pipeline.specs.tune import AnnealOptions, KernelSearch
from pipeline.synthetic.shapes import LLAMA_8B, SMOLLM2
from pipeline.tune.engine_configs import EngineConfigs
from pipeline.tune.kernel_run import engine_items
from pipeline.tune.kernel_tuning import strategy_for, tune_items
from pipeline.tune.tuning_cache import TuningCache
from scripts.bench_ab import REPO, run_child
from scripts.engine_run import Workload
from scripts.model_shapes import (
    build_engine,
    random_hf_model,
    write_checkpoint,
    write_tokenizer,
)
from scripts.quant_checkpoints import activation_amax, write_quantized_checkpoint
from scripts.tune_kernels_report import write_outputs

SHAPES = {"llama-3.1-8b-shape": LLAMA_8B, "smollm2-135m-shape": SMOLLM2}
STRATEGIES = ("anneal", "random", "autotune_list")


def build(args, tmp: Path, work: Workload) -> Path:
    """The engine dir of the model shape (quantized with --quant)."""
    shape = SHAPES[args.model]
    model = random_hf_model(shape, torch.bfloat16, torch.device("cuda"))
    ckpt = write_checkpoint(model, "bfloat16", tmp / "ckpt")
    tokenizer = write_tokenizer(shape["vocab_size"], tmp / "tokenizer")
    if args.quant:
        from scripts.engine_run import prompts_for

        amax = activation_amax(model, prompts_for(shape["vocab_size"], work, 4, seed=3))
        ckpt = write_quantized_checkpoint(ckpt, args.quant, amax, tmp / "qckpt", model.device)
    del model
    torch.cuda.empty_cache()
    return build_engine(ckpt, tokenizer, tmp / "engine", work)


def kernel_spaces(search):
    """item -> its KernelSpace on this GPU, sharing one timer."""
    from pipeline.tune.kernel_space import KernelSpace
    from pipeline.tune.kernel_timer import KernelTimer

    device = torch.device("cuda")
    timer = KernelTimer(device, search.launches_per_sample, search.flush_l2)
    return lambda item: KernelSpace(item, device, search, timer)


def compare_strategies(strategies, items, options, cache, make_space) -> dict:
    """Each item under each strategy at the same budget; the annealer's results fill the cache."""
    rows: dict[str, dict] = {}
    annealed = tune_items(items, cache, make_space, options, "anneal")
    for item, result in zip(items, annealed, strict=True):
        row = {"item": f"{item.kernel} [{item.label}]", "shape": item.key}
        row["anneal"] = result.to_dict()
        for name in strategies:
            if name == "anneal":
                continue
            space = make_space(item)
            if name == "autotune_list" and not space.autotune_list():
                row[name] = {"note": "constants: no list beyond the default"}
                continue
            searched = strategy_for(name, options, space, time.monotonic).run(space)
            row[name] = {"item": row["item"], **searched.to_dict()}
        rows[row["item"]] = row
    return rows


def cache_reuse(items, options, cache_path: Path) -> dict:
    """A second pass over the same items on the same GPU: every one must come from the cache."""
    cache = TuningCache.open(cache_path, toolchain.environment())

    def refuse(item):
        raise AssertionError(f"{item.kernel} [{item.label}] was measured again")

    results = tune_items(items, cache, refuse, options, "anneal")
    return {
        "num_items": len(results),
        "num_from_cache": sum(r.cached is not None for r in results),
        "num_trials": sum(r.to_dict()["num_trials"] for r in results),
    }


def engine_with_configs(engine_dir: Path, items, cache_path: Path, out: Path) -> tuple[Path, dict]:
    """A copy of the engine dir (files linked) whose kernel_configs.json holds the cache's
    entries for its items, as `make build` writes it."""
    out.mkdir()
    for path in engine_dir.iterdir():
        (out / path.name).symlink_to(path.resolve())
    lookup = EngineConfigs(cache_path, items, toolchain.environment())
    return out, lookup.write(out)


def _instruction_child(engine_dir: Path, search, options, out: Path) -> None:
    from pipeline.tune.instruction_run import search_schedule

    item = engine_items(engine_dir, replace(search, kernels=("varlen_attention",)))[0]
    found = search_schedule(item, search, options, out)
    (out / "instructions.json").write_text(json.dumps(found, default=str))


def instruction_search(engine_dir: Path, search, options, out: Path) -> dict:
    """The SIP search in a process of its own: a reordered schedule that faults on the GPU
    (a misaligned address was seen) leaves that process's CUDA context unusable, and the engine
    runs that follow need this one's."""
    (out / "instructions.json").unlink(missing_ok=True)
    child = multiprocessing.get_context("spawn").Process(
        target=_instruction_child, args=(engine_dir, search, options, out)
    )
    child.start()
    child.join()
    if child.exitcode == 0 and (out / "instructions.json").is_file():
        return json.loads((out / "instructions.json").read_text())
    return {
        "error": f"the instruction search's process exited with code {child.exitcode} (a "
        f"candidate schedule faulted on the GPU; its error is in the log)",
        "level": "PTX",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", choices=SHAPES, default="llama-3.1-8b-shape")
    parser.add_argument("--quant", default="", help="e.g. int8_wo (adds the W8A16 kernels)")
    parser.add_argument(
        "--kernels",
        nargs="+",
        choices=[*KERNEL_SOURCES, "all"],
        default=["paged_decode_attention", "varlen_attention", "int8_gemv"],
    )
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=240, help="budget per item and strategy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decode-batch", type=int, nargs="+", default=[1, 512])
    parser.add_argument("--prompt-tokens", type=int, nargs="+", default=[8192])
    parser.add_argument("--context-len", type=int, default=192)
    parser.add_argument("--cache", type=Path, help="default: OUT/kernel-tuning-cache.json")
    parser.add_argument("--skip-engine", action="store_true")
    parser.add_argument("--skip-instructions", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cache_path = args.cache or args.out / "kernel-tuning-cache.json"
    kernels = () if "all" in args.kernels else tuple(args.kernels)
    search = KernelSearch(
        kernels=kernels,
        cache_path=str(cache_path),
        decode_batch_sizes=tuple(args.decode_batch),
        prompt_tokens=tuple(args.prompt_tokens),
        context_len=args.context_len,
    )
    options = AnnealOptions(
        seed=args.seed, max_trials=args.trials, repeats=args.repeats, max_seconds=args.seconds
    )
    work = Workload()  # 512 requests of 128 + 128 tokens, engine max_batch_size 512
    results = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "environment": toolchain.environment(),
        "options": asdict(options),
        "search": asdict(search),
    }
    with tempfile.TemporaryDirectory(prefix="tune_kernels_") as tmp:
        tmp = Path(tmp)
        engine_dir = build(args, tmp, work)
        items = engine_items(engine_dir, search)
        TUNED.install({})
        cache = TuningCache.open(cache_path, results["environment"])
        results["strategies"] = compare_strategies(
            args.strategies, items, options, cache, kernel_spaces(search)
        )
        write_outputs(results, args.out)
        results["cache_reuse"] = cache_reuse(items, options, cache_path)
        write_outputs(results, args.out)
        if not args.skip_instructions:
            results["instructions"] = instruction_search(engine_dir, search, options, args.out)
            write_outputs(results, args.out)
        if not args.skip_engine:
            gc.collect()
            torch.cuda.empty_cache()  # the engines run in child processes: leave them the GPU
            vocab = SHAPES[args.model]["vocab_size"]
            tuned_dir, record = engine_with_configs(engine_dir, items, cache_path, tmp / "tuned")
            args.device, args.dtype = "cuda", "bfloat16"
            results["engine"] = {
                "kernel_tuning": record,
                "without_cache": run_child(REPO, engine_dir, args, work, vocab, {}),
                "with_cache": run_child(REPO, tuned_dir, args, work, vocab, {}),
            }
            write_outputs(results, args.out)
        shutil.rmtree(tmp / "engine", ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
