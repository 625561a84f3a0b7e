"""Step-time breakdown of the torch engine under torch.profiler, per model and batch size.

    python -m scripts.profile_engine --out $OUT [--models NAME] [--batch-sizes 1 64]

Models: Llama-3.1-8B and SmolLM2-135M shapes with random bf16 weights on CUDA
(scripts.model_shapes). Per batch size B: B prompts of --input-len tokens go in together; the
"prefill" phase is the steps until every one has its first token (the step token budget,
max_num_tokens = 8192, splits B=256 x 128 over several steps, later ones mixed with decodes),
then "decode" is --num-profile-steps steps of B sequences decoding, after warm-up steps, then
"mixed" is as many steps where one new prompt joins the B decodes each step (what a server's
requests, returning one by one, make of most steps). Each
batch runs three times: warm-up (Triton JIT), timed (host clock around step() + a device sync),
profiled (CPU + CUDA activities). Per phase and step: wall ms, GPU busy ms and idle %, CPU ms of
the engine's record_function ranges, device ms per kernel class, launches, kernels, host syncs,
whether decode replayed a CUDA graph. Writes profile_engine.json + profile_engine.md (after each
model) and traces/<model>-<phase>-b<B>.json.gz (one step's chrome trace) to --out. --tiny runs
the same code on CPU with a tiny fp32 model (the unit test).
"""

import argparse
import gzip
import itertools
import json
import logging
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from pipeline.engine import LLMEngine, SamplingParams, StreamDelta
from pipeline.engine_json import EngineJson
from pipeline.synthetic.shapes import LLAMA_8B, SMOLLM2, TINY
from scripts.engine_run import Workload, free_memory, prompts_for, sync
from scripts.model_shapes import (
    build_engine,
    random_hf_model,
    write_checkpoint,
    write_tokenizer,
)
from scripts.profile_report import STEP_RANGE, markdown, one_step_trace, summarize_trace

log = logging.getLogger("profile_engine")

MODELS = {"llama-3.1-8b-shape": LLAMA_8B, "smollm2-135m-shape": SMOLLM2}
TINY_MODELS = {"tiny-llama": TINY}
PHASES = ("prefill", "decode", "mixed")
MAX_TRACE_BYTES = 16 << 20


@dataclass(frozen=True)
class Settings:
    batch_sizes: tuple[int, ...]
    input_len: int
    num_warmup_steps: int
    num_profile_steps: int

    @property
    def max_tokens(self) -> int:
        # the prefill token, warm-up, decode and mixed steps, and one more: nobody finishes inside
        return 2 + self.num_warmup_steps + 2 * self.num_profile_steps


@dataclass
class PhaseRun:
    wall_ms: list[float]  # host clock per step, device synced
    num_tokens: int  # tokens the phase's steps fed to the model
    trace: dict | None  # the chrome trace, when profiled


@contextmanager
def profiling(device: torch.device, trace_path: Path | None) -> Iterator[None]:
    """torch.profiler around the block (CUDA activity on a GPU), exported to trace_path; a
    plain block when trace_path is None."""
    if trace_path is None:
        yield
        return
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        yield
    prof.export_chrome_trace(str(trace_path))


def until_first_tokens(request_ids: set[str]) -> Callable[[list[StreamDelta]], bool]:
    pending = set(request_ids)

    def is_done(deltas: list[StreamDelta]) -> bool:
        pending.difference_update(d.request_id for d in deltas if d.token_ids)
        return not pending

    return is_done


def after_steps(num_steps: int) -> Callable[[list[StreamDelta]], bool]:
    counter = itertools.count(1)
    return lambda _: next(counter) >= num_steps


def joining(
    engine: LLMEngine, prompts: Iterator[list[int]], params: SamplingParams, ids: set[str]
) -> Callable[[list[StreamDelta]], bool]:
    """After each step, the next prompt joins (into ids); done once every prompt has joined."""

    def is_done(_deltas: list[StreamDelta]) -> bool:
        prompt = next(prompts, None)
        if prompt is not None:
            ids.add(engine.add_request(prompt, params))
        return prompt is None

    return is_done


def run_phase(
    engine: LLMEngine,
    device: torch.device,
    is_done: Callable[[list[StreamDelta]], bool],
    trace_path: Path | None,
) -> PhaseRun:
    tokens_before = engine.stats()["num_scheduled_tokens"]
    wall_ms = []
    with profiling(device, trace_path):
        is_running = True
        while is_running:
            start = time.perf_counter()
            with record_function(STEP_RANGE):
                deltas = engine.step()
            sync(device)  # outside the range: the engine's own syncs are what gets counted
            wall_ms.append((time.perf_counter() - start) * 1e3)
            is_running = not is_done(deltas)
    trace = json.loads(trace_path.read_text()) if trace_path else None
    return PhaseRun(wall_ms, engine.stats()["num_scheduled_tokens"] - tokens_before, trace)


def run_round(
    engine: LLMEngine,
    prompts: list[list[int]],
    settings: Settings,
    device: torch.device,
    trace_dir: Path | None,
) -> dict[str, PhaseRun]:
    """One batch through both phases; the engine is empty again after."""
    params = SamplingParams(max_tokens=settings.max_tokens, ignore_eos=True)
    ids = {engine.add_request(p, params) for p in prompts}
    runs = {}
    paths = {p: trace_dir / f"{p}.json" if trace_dir else None for p in PHASES}
    runs["prefill"] = run_phase(engine, device, until_first_tokens(ids), paths["prefill"])
    for _ in range(settings.num_warmup_steps):
        engine.step()
    decode_done = after_steps(settings.num_profile_steps)
    runs["decode"] = run_phase(engine, device, decode_done, paths["decode"])
    joiners = itertools.islice(itertools.cycle(prompts), settings.num_profile_steps)
    joining(engine, joiners, params, ids)([])  # the first mixed step's prompt
    runs["mixed"] = run_phase(engine, device, joining(engine, joiners, params, ids), paths["mixed"])
    for request_id in ids:
        engine.abort(request_id)
    engine.step()  # delivers the cancellations
    return runs


def profile_batch(
    engine: LLMEngine, batch_size: int, settings: Settings, device: torch.device, scratch: Path
) -> list[tuple[dict, dict]]:
    """Warm-up, timed and profiled rounds of one batch size -> per phase: (its row, the chrome
    trace of its first profiled step)."""

    def prompts(seed: int) -> list[list[int]]:
        return prompts_for(engine.limits.vocab_size, settings, batch_size, seed=seed)

    run_round(engine, prompts(0), settings, device, None)  # Triton JIT, allocator growth
    timed = run_round(engine, prompts(1), settings, device, None)
    profiled = run_round(engine, prompts(2), settings, device, scratch)
    is_gpu = device.type == "cuda"
    rows = []
    for phase in PHASES:
        summary = summarize_trace(profiled[phase].trace["traceEvents"])
        wall_ms = statistics.mean(timed[phase].wall_ms)
        row = {
            "phase": phase,
            "batch_size": batch_size,
            "num_steps": len(timed[phase].wall_ms),
            "tokens_per_step": timed[phase].num_tokens / len(timed[phase].wall_ms),
            "wall_ms": wall_ms,
            "wall_ms_steps": timed[phase].wall_ms,
            "profiled_wall_ms": statistics.mean(profiled[phase].wall_ms),
            # busy time from the profiled round, wall from the unprofiled one (the profiler
            # slows the host, hardly the kernels)
            "gpu_idle_pct": max(0.0, 100 * (1 - summary["gpu_busy_ms"] / wall_ms))
            if is_gpu
            else None,
            **summary,
            "is_cuda_graph": bool(
                engine.stats()["cuda_graph_batch_sizes"] and summary["num_graph_launches"]
            ),
        }
        rows.append((row, one_step_trace(profiled[phase].trace)))
    return rows


def load_engine(
    shape: dict, settings: Settings, device: torch.device, dtype: torch.dtype, scratch: Path
) -> tuple[LLMEngine, float]:
    """Random weights -> checkpoint -> torch engine build -> loaded engine, KV sized for the
    largest batch (the 0.9-of-free-memory default takes long to allocate and fill)."""
    dtype_name = str(dtype).removeprefix("torch.")
    start = time.perf_counter()
    model = random_hf_model(shape, dtype, device)
    ckpt = write_checkpoint(model, dtype_name, scratch / "ckpt")
    del model
    free_memory()
    tokenizer_dir = write_tokenizer(shape["vocab_size"], scratch / "tokenizer")
    max_batch = max(settings.batch_sizes) + settings.num_profile_steps  # room for "mixed"
    work = Workload(
        input_len=settings.input_len, output_len=settings.max_tokens, max_batch_size=max_batch
    )
    engine_dir = build_engine(ckpt, tokenizer_dir, scratch / "engine", work)
    shutil.rmtree(ckpt)  # the engine holds a copy of the weights; the 8B's are 16 GB on disk
    cfg = EngineJson.read(engine_dir).build
    block_size = cfg["plugin_config"]["tokens_per_block"]
    num_kv_blocks = max_batch * -(-cfg["max_seq_len"] // block_size)
    # one step a launch: each step() is the one step this breaks down (and the phases' token
    # budget counts steps); the auto value would run several decode steps in a step() on a GPU
    engine = LLMEngine.from_engine_dir(
        engine_dir,
        device=str(device),
        dtype=dtype_name,
        num_kv_blocks=num_kv_blocks,
        num_scheduler_steps=1,
    )
    return engine, time.perf_counter() - start


def write_trace(trace: dict, path: Path) -> str | None:
    """Gzipped chrome trace; returns the path relative to --out, None when it is too large."""
    data = gzip.compress(json.dumps(trace).encode())
    if len(data) >= MAX_TRACE_BYTES:
        log.warning("%s: %d bytes gzipped, over the limit; not written", path, len(data))
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return f"{path.parent.name}/{path.name}"


def profile_model(
    name: str,
    shape: dict,
    settings: Settings,
    device: torch.device,
    dtype: torch.dtype,
    out_dir: Path,
) -> dict:
    with tempfile.TemporaryDirectory(prefix="profile_engine_") as tmp:
        log.info("%s: build + load", name)
        engine, load_s = load_engine(shape, settings, device, dtype, Path(tmp))
        rows = []
        for batch_size in settings.batch_sizes:
            log.info("%s: batch %d", name, batch_size)
            for row, trace in profile_batch(engine, batch_size, settings, device, Path(tmp)):
                trace_path = out_dir / "traces" / f"{name}-{row['phase']}-b{batch_size}.json.gz"
                rows.append({**row, "trace_file": write_trace(trace, trace_path)})
        stats = engine.stats()
        del engine
    free_memory()
    return {
        "load_s": load_s,
        "dtype": str(dtype).removeprefix("torch."),
        "num_kv_blocks": stats["num_total_blocks"],
        "cuda_graph_batch_sizes": stats["cuda_graph_batch_sizes"],
        "rows": rows,
    }


def write_results(results: dict, out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "profile_engine.json").write_text(json.dumps(results, indent=2))
    table = markdown(results)
    (out_dir / "profile_engine.md").write_text(table + "\n")
    return table


def run(args: argparse.Namespace, models: dict[str, dict]) -> dict:
    device = torch.device("cpu" if args.tiny else "cuda")
    dtype = torch.float32 if args.tiny else torch.bfloat16
    if args.tiny:  # torch's default OMP threads spin on a busy small CPU: far slower steps
        torch.set_num_threads(1)
    settings = Settings(
        batch_sizes=tuple(args.batch_sizes or ((1, 4) if args.tiny else (1, 64, 256))),
        input_len=args.input_len or (16 if args.tiny else 128),
        num_warmup_steps=args.num_warmup_steps,
        num_profile_steps=args.num_profile_steps,
    )
    results = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "settings": asdict(settings),
        "models": {},
    }
    for name in args.models or list(models):
        start = time.perf_counter()
        results["models"][name] = profile_model(
            name, models[name], settings, device, dtype, args.out
        )
        results["models"][name]["wall_s"] = time.perf_counter() - start
        write_results(results, args.out)  # partial results survive a later failure
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", nargs="+", help=f"subset of {', '.join(MODELS)} (tiny-llama)")
    parser.add_argument("--batch-sizes", nargs="+", type=int, help="default 1 64 256 (1 4)")
    parser.add_argument("--input-len", type=int, help="prompt tokens; default 128 (16)")
    parser.add_argument("--num-warmup-steps", type=int, default=3, help="decode, unmeasured")
    parser.add_argument("--num-profile-steps", type=int, default=10, help="decode, measured")
    parser.add_argument("--tiny", action="store_true", help="CPU, tiny model: tests the script")
    args = parser.parse_args(argv)
    models = TINY_MODELS if args.tiny else MODELS
    unknown = sorted(set(args.models or ()) - set(models))
    if unknown:
        parser.error(f"unknown --models {unknown}; choose from {', '.join(models)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    # CUPTI re-initialised after a teardown crashes around CUDA graphs, and this run opens a
    # profiler session per phase and batch: keep it up (as torch.compile does for its graphs)
    os.environ.setdefault("TEARDOWN_CUPTI", "0")
    start = time.perf_counter()
    results = run(args, models)
    results["total_s"] = time.perf_counter() - start
    print(write_results(results, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
