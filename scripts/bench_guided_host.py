"""Guided decoding's host cost a step, per guided row, without a model: the engine's own
GrammarBitmask and Sequence driven as the runner and scheduler drive them.

    python -m scripts.bench_guided_host --out DIR [--rows 64 512] [--steps 64]
        [--launch-steps 4] [--tokenizer HF_DIR] [--clock wall|cpu] [--tiny]

Every row runs scripts.bench_guided's JSON schema. A launch of --launch-steps steps fills one
bitmask a step (GrammarBitmask.fill: the tokens the step before sampled advance each matcher,
then the allowed tokens are written), as the runner does while the device runs the forward;
after the next launch is queued the scheduler appends the launch's tokens (Sequence
append_tokens, which checks them against the grammar). Each row's token is drawn at random from
its bitmask (seeded, outside the clock), as a random-weight model samples under the schema; the
digest of every row's tokens lets two trees' runs be compared for equality. Timed: microseconds
a row a step of the launch path (fill) and of the scheduler's append, the median launch; a
second pass under torch.profiler splits the launch path by its phase ranges (guided.*), as
shares of its time. --clock cpu times the engine thread's CPU (the fill runs on it too), which other
work on a shared host does not stretch. The tokenizer: a Hugging Face tokenizer dir (SmolLM2's,
say), else a byte-level one of SmolLM2's vocabulary size (what scripts.bench_guided's engines
have). Writes bench_guided_host.json and .md. --tiny: 4 and 16 rows, a few steps, a
1,024-token vocabulary.
"""

import argparse
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.profiler import record_function

from pipeline.engine.execution.grammar_bitmask import GrammarBitmask
from pipeline.engine.guided.grammar_compiler import GrammarCompiler, tokenizer_info
from pipeline.engine.guided.grammar_state import GrammarState
from pipeline.engine.scheduling.sequence import Sequence
from pipeline.request.guided import json_schema_guide
from pipeline.request.sampling_params import SamplingParams
from scripts.bench_guided import bench_schema
from scripts.byte_tokenizer import write_byte_tokenizer

SMOLLM2_VOCAB = 49152
STEP = "guided.step"  # the bench's range around a step's GrammarBitmask.fill


@dataclass(frozen=True)
class Run:
    rows: int
    steps: int  # timed steps (whole launches)
    launch_steps: int
    warmup_steps: int
    clock: str  # "wall" or "cpu"


class GuidedRows:
    """Guided sequences stepped launch by launch; the clock covers the engine's calls only."""

    def __init__(self, compiler: GrammarCompiler, run: Run, seed: int):
        guide = json_schema_guide(bench_schema(1 << 20))  # never complete: every row runs on
        params = SamplingParams(max_tokens=1 << 20, ignore_eos=True, guide=guide)
        self.vocab = compiler.vocab_size
        self.seqs = []
        for i in range(run.rows):
            seq = Sequence(str(i), [1], params, ())
            seq.grammar = GrammarState(compiler.compile(guide), seq.end_ids)
            self.seqs.append(seq)
        self.masks = GrammarBitmask(self.vocab, run.rows, torch.device("cpu"))
        self.run = run
        # cpu: this thread's CPU time, which other processes on the host do not stretch
        self.clock = time.thread_time if run.clock == "cpu" else time.perf_counter
        self.rng = np.random.default_rng(seed)
        self.last = None  # the launch before's last step's tokens (pending on the host)
        self.unappended = None  # its tokens, [steps][rows], the scheduler has not appended
        self.digest = hashlib.sha256()
        self.fill_s: list[float] = []  # a launch's, each
        self.append_s: list[float] = []

    def launch(self) -> None:
        self.masks.start_launch()
        step_tokens, tokens = None, []
        self.fill_s.append(0.0)
        for _ in range(self.run.launch_steps):
            with record_function(STEP):  # the profiled pass's whole (a no-op elsewhere)
                start = self.clock()
                filled = self.masks.fill(self.seqs, self.last, step_tokens)
                self.fill_s[-1] += self.clock() - start
            sampled = self._sample(filled)
            tokens.append(sampled)
            step_tokens = (torch.tensor(sampled), None)
        for row, seq in enumerate(self.seqs):  # the scheduler's update_from_launch
            seq.num_pending_tokens += self.run.launch_steps
            seq.pending_row = row
        self._append()
        self.last, self.unappended = step_tokens, tokens

    def _sample(self, filled: tuple[torch.Tensor, torch.Tensor] | None) -> list[int]:
        """A row's token: the first allowed one from a random word of its bitmask on (cyclic),
        a random bit of that word."""
        assert filled is not None and len(filled[1]) == len(self.seqs), "a row left its grammar"
        words = filled[0].numpy().view(np.uint32)
        starts = self.rng.integers(words.shape[1], size=len(words))
        picks = self.rng.integers(32, size=len(words))
        sampled = []
        for row, start, pick in zip(words, starts, picks, strict=True):
            nonzero = np.flatnonzero(np.roll(row, -start))
            word = (start + nonzero[0]) % len(row)
            bits = [b for b in range(32) if int(row[word]) >> b & 1]
            sampled.append(word * 32 + bits[pick % len(bits)])
        self.digest.update(np.asarray(sampled, dtype=np.int64).tobytes())
        return sampled

    def _append(self) -> None:
        """The launch before's tokens, appended once this one is queued (overlap scheduling)."""
        if self.unappended is None:
            return
        steps = len(self.unappended)
        start = self.clock()
        for row, seq in enumerate(self.seqs):
            seq.num_pending_tokens -= steps
            taken, reason = seq.append_tokens([step[row] for step in self.unappended])
            assert (taken, reason) == (steps, None), f"row {row} ended: {reason}"
        self.append_s.append(self.clock() - start)


def measure(compiler: GrammarCompiler, run: Run, seed: int) -> dict:
    bench = GuidedRows(compiler, run, seed)
    num_launches = -(-run.warmup_steps // run.launch_steps)
    for _ in range(num_launches):
        bench.launch()
    bench.fill_s, bench.append_s = [], []
    timed = run.steps // run.launch_steps
    for _ in range(timed):
        bench.launch()
    # medians of the launches: the host's other work stretches some launches, not the cost
    us = 1e6 / (run.rows * run.launch_steps)
    fill_us, append_us = np.median(bench.fill_s) * us, np.median(bench.append_s) * us
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(timed):
            bench.launch()
    # the launch path's phase ranges, as shares of its time under the profiler times its time
    # on the clock (the profiler's own cost and clock left out)
    totals = {e.key: e.cpu_time_total for e in prof.key_averages() if e.key.startswith("guided.")}
    whole = totals.pop(STEP)
    phases = {name: fill_us * total / whole for name, total in totals.items()}
    return {
        "fill_us": fill_us,
        "append_us": append_us,
        "total_us": fill_us + append_us,
        "phases_us": phases,
        "tokens_sha256": bench.digest.hexdigest(),
    }


def markdown(results: dict) -> str:
    lines = [
        f"Guided host work, us a row a step ({results['tokenizer']}, {results['launch_steps']} "
        f"steps a launch, {results['steps']} steps, "
        f"{results['clock']} clock).",
        "",
        "| rows | launch path (fill) | scheduler (append) | total | launch path phases |",
        "|---|---|---|---|---|",
    ]
    for rows, r in results["rows"].items():
        phases = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["phases_us"].items())) or "-"
        lines.append(
            f"| {rows} | {r['fill_us']:.2f} | {r['append_us']:.2f} | {r['total_us']:.2f} | "
            f"{phases} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", nargs="+", type=int, default=[64, 512])
    parser.add_argument("--steps", type=int, default=64, help="timed steps")
    parser.add_argument("--warmup-steps", type=int, default=16)
    parser.add_argument("--launch-steps", type=int, default=4)
    parser.add_argument("--tokenizer", type=Path, help="a Hugging Face tokenizer dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--clock", choices=["wall", "cpu"], default="wall", help="cpu: this thread's"
    )
    parser.add_argument("--tiny", action="store_true", help="small and quick: tests the script")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    args.out.mkdir(parents=True, exist_ok=True)
    vocab = 1024 if args.tiny else SMOLLM2_VOCAB
    path = args.tokenizer or write_byte_tokenizer(vocab, args.out / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(path)
    vocab = max(vocab, len(tokenizer))
    compiler = GrammarCompiler(tokenizer_info(tokenizer, vocab, (tokenizer.eos_token_id,)))
    rows = [4, 16] if args.tiny else args.rows
    steps, warmup = (8, 4) if args.tiny else (args.steps, args.warmup_steps)
    results = {
        "tokenizer": str(args.tokenizer or f"byte-level, {vocab} tokens"),
        "launch_steps": args.launch_steps,
        "clock": args.clock,
        "steps": steps,
        "rows": {},
    }
    for num_rows in rows:
        run = Run(num_rows, steps, args.launch_steps, warmup, args.clock)
        results["rows"][str(num_rows)] = measure(compiler, run, args.seed)
    (args.out / "bench_guided_host.json").write_text(json.dumps(results, indent=2))
    (args.out / "bench_guided_host.md").write_text(markdown(results) + "\n")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
