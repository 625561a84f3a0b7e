"""Multi-rank engines leave their process groups cleanly: each mapping's engine (synthetic
weights) generates, closes and its process exits normally (interpreter teardown included), and
its log (rank 0's and the worker ranks', one stderr) must show no "destroy_process_group() was
not called" warning, no abort fallback ("aborting the NCCL groups"), and close() must return
within CLOSE_LIMIT_S.

    python -m scripts.check_rank_teardown --out DIR [--tiny]

On CUDA: tp2 and pp2 (and tp2pp2 with 4 GPUs) of a small Llama shape in bfloat16; --tiny: tp2
and pp2 on the CPU (gloo) with a tiny shape (the unit test). Writes rank_teardown.json + .md.
Needs torch + transformers, not hydra."""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.specs.build import BuildSpec
from pipeline.synthetic.shapes import LLAMA_8B, TINY
from pipeline.synthetic.weights import HOOK, checkpoint_config, write_engine
from scripts.model_shapes import write_tokenizer

SMALL = {**LLAMA_8B, "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 4}
SMALL |= {"num_attention_heads": 16, "num_key_value_heads": 8}
NCCL_WARNING = "destroy_process_group() was not called"
ABORTED = "aborting the NCCL groups"
CLOSE_LIMIT_S = 20.0
CHILD_LIMIT_S = 300.0


def child(engine_dir: Path, device: str, result_path: Path) -> None:
    """Load, generate, close, then return: the interpreter's teardown follows (no os._exit)."""
    engine = LLMEngine.from_engine_dir(engine_dir, device=device, weights_loader=HOOK)
    out = engine.generate([[5, 17, 3, 99], [100, 2, 7]], SamplingParams(max_tokens=8))
    start = time.perf_counter()
    engine.close()
    close_s = time.perf_counter() - start
    tokens = [o.token_ids for o in out]
    result_path.write_text(json.dumps({"close_s": close_s, "tokens": tokens}))


def check(name: str, tp: int, pp: int, device: str, work: Path, tokenizer: Path) -> dict:
    shape, dtype = (TINY, "float32") if device == "cpu" else (SMALL, "bfloat16")
    build = BuildSpec(max_batch_size=4, max_input_len=16, max_seq_len=32, max_num_tokens=64)
    engine_dir = write_engine(
        checkpoint_config(shape, dtype, tp, pp, None), build, tokenizer, work / name
    )
    result_path = work / f"{name}.json"
    command = [sys.executable, "-m", "scripts.check_rank_teardown", "--child", str(engine_dir)]
    command += ["--device", device, "--result", str(result_path)]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_LIMIT_S)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": f"no exit in {CHILD_LIMIT_S:.0f} s"}
    log = done.stdout + done.stderr
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    problems = []
    if done.returncode != 0:
        problems.append(f"exit code {done.returncode}")
    if NCCL_WARNING in log:
        problems.append("NCCL's destroy_process_group warning")
    if ABORTED in log:
        problems.append("a destroy that did not finish: the groups were aborted")
    if result.get("close_s", CLOSE_LIMIT_S + 1) > CLOSE_LIMIT_S:
        problems.append(f"close() took {result.get('close_s')} s")
    return {
        "ok": not problems,
        "why": "; ".join(problems),
        "close_s": result.get("close_s"),
        "process_s": time.perf_counter() - start,
        "log_tail": log[-2000:] if problems else "",
    }


def markdown(results: dict) -> str:
    lines = ["# Rank teardown", "", "| mapping | ok | close() s | process s | problem |"]
    lines.append("|---|---|---|---|---|")
    for name, r in results["mappings"].items():
        close = "-" if r.get("close_s") is None else f"{r['close_s']:.2f}"
        process = "-" if r.get("process_s") is None else f"{r['process_s']:.1f}"
        lines.append(f"| {name} | {r['ok']} | {close} | {process} | {r['why'] or '-'} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--device", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.device, args.result)
        return 0
    device = "cpu" if args.tiny else "cuda"
    mappings = {"tp2": (2, 1), "pp2": (1, 2)}
    if device == "cuda" and torch.cuda.device_count() >= 4:
        mappings["tp2pp2"] = (2, 2)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rank-teardown-") as tmp:
        work = Path(tmp)
        shape = TINY if args.tiny else SMALL
        tokenizer = write_tokenizer(shape["vocab_size"], work / "tokenizer")
        results = {"device": device, "mappings": {}}
        for name, (tp, pp) in mappings.items():
            results["mappings"][name] = check(name, tp, pp, device, work, tokenizer)
    (args.out / "rank_teardown.json").write_text(json.dumps(results, indent=1) + "\n")
    text = markdown(results)
    (args.out / "rank_teardown.md").write_text(text)
    print(text)
    return 0 if all(r["ok"] for r in results["mappings"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
