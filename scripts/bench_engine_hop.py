"""The served engine's hop to its python stub: host CPU per delivered token on each side.

    python -m scripts.bench_engine_hop --out DIR [--before-tree DIR] [--busy-stub]

A tiny random Llama engine (scripts.bench_host_step.tiny_engine_dir) runs in its engine process
behind an LLMService, as the `tensorrt_llm` model serves it, with --streams streaming requests
at a time (closed loop) answered through a stand-in for the python backend's send
(scripts/engine_hop_stub.py). Per delivered token: CPU microseconds of the stub's process and of
the engine process (psutil, user + system), and how many engine messages (IPC) and responses
each hop made. The engine's forward is in the engine process's CPU, the same in both trees.
--before-tree runs another source tree (`git archive <commit> | tar -x -C DIR`) in the same run,
alternating with this one, --rounds times each (the median is kept). --busy-stub: a thread
holds the stub's GIL in turns, as its tokenizing and execute() do under load, so its engine
reader falls behind: what an engine that waits for its reader loses shows in out tok/s.
--stacks: the stub's threads' CPU by sampled stack (the sampler's own CPU is in the stub's)
(scripts/stack_sampler.py), the last round's, in TREE-stacks.txt. Writes engine_hop.json and
engine_hop.md.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from scripts.bench_host_step import tiny_engine_dir

REPO = Path(__file__).resolve().parent.parent
KEYS = (
    "stub_cpu_us_per_token",
    "engine_cpu_us_per_token",
    "out_tok_s",
    "ipc_messages",
    "ipc_rows",
    "responses",
    "engine_steps",
)


def measure_tree(tree: Path, engine_dir: Path, args: argparse.Namespace, stacks: str) -> dict:
    cmd = [
        sys.executable,
        str(REPO / "scripts" / "engine_hop_stub.py"),
        f"--engine-dir={engine_dir}",
        f"--streams={args.streams}",
        f"--requests={args.requests}",
        f"--input-len={args.input_len}",
        f"--output-len={args.output_len}",
        f"--send-us={args.send_us}",
        f"--max-response-rate={args.max_response_rate}",
        *(["--busy-stub"] if args.busy_stub else []),
        *([f"--stacks={stacks}"] if args.stacks else []),
    ]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{tree}: the stub runner failed:\n{out.stderr[-4000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["complete_streams"] != result["num_streams"] or not result["same_tokens"]:
        raise RuntimeError(f"{tree}: a stream lost or changed tokens: {result}")
    return result


def markdown(result: dict) -> str:
    lines = [
        "# Engine process -> python stub: host CPU per delivered token",
        "",
        f"Host: {result['host_cpus']} CPUs; {result['settings']}; median of "
        f"{result['rounds']} round(s).",
        "",
        "| tree | stub CPU us / token | engine CPU us / token | out tok/s | engine steps "
        "| IPC messages / step | rows / message | tokens / response |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, t in result["trees"].items():
        per_step = t["ipc_messages"] / max(1, t["engine_steps"])
        rows = t["ipc_rows"] / max(1, t["ipc_messages"])
        per_response = t["tokens"] / max(1, t["responses"])
        lines.append(
            f"| {name} | {t['stub_cpu_us_per_token']:.1f} | {t['engine_cpu_us_per_token']:.1f} "
            f"| {t['out_tok_s']:,.0f} | {t['engine_steps']:.0f} | {per_step:.2f} | {rows:.1f} "
            f"| {per_response:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--before-tree", type=Path, default=None)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--input-len", type=int, default=16)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--send-us", type=float, default=50.0, help="a send's round trip")
    parser.add_argument("--max-response-rate", type=float, default=500.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy-stub", action="store_true")
    parser.add_argument(
        "--stacks", action="store_true", help="sample the stub's threads (TREE-stacks.txt)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    trees = {"this": REPO}
    if args.before_tree is not None:
        trees = {"before": args.before_tree.resolve(), **trees}
    rounds: dict[str, list] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="engine-hop-") as tmp:
        engine_dir = tiny_engine_dir(Path(tmp), args.streams, args.input_len, args.output_len)
        for _ in range(args.rounds):  # alternating: drift on a shared host hits both
            for name, tree in trees.items():
                stacks = str(args.out / f"{name}-stacks.txt")
                rounds[name].append(measure_tree(tree, engine_dir, args, stacks))
    medians = {
        name: {
            "tokens": runs[0]["tokens"],
            **{k: statistics.median(r[k] for r in runs) for k in KEYS},
            "rounds": runs,
        }
        for name, runs in rounds.items()
    }
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "before_tree", "stacks")}
    result = {
        "host_cpus": os.cpu_count(),
        "rounds": args.rounds,
        "settings": settings,
        "trees": medians,
    }
    (args.out / "engine_hop.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    text = markdown(result)
    (args.out / "engine_hop.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
