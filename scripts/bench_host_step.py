"""The engine's host work a launch, with the model stubbed: what paces the GPU for a small model.

For a small model the host's part of a launch is as long as the GPU's (docs/design.md, "Launches
and pacing"), so it decides whether the GPU waits. This measures that part on any machine, CPU
included:

    python -m scripts.bench_host_step --out /tmp/host [--batch 1 64 256] [--steps 3]

A tiny Llama engine (scripts.model_shapes' TINY shape, built as the torch backend builds it) whose
forward returns fixed logits, with overlap scheduling and --steps decode steps a launch, as on
CUDA. Two arrival shapes a batch size:
- lockstep: the batch starts together and every request runs --output-len tokens (the direct
  bench's waves: pure decode launches, each the same rows as the one before);
- staggered: requests end at spread-out steps and each is replaced at once by a new prompt (the
  served shape: prompts join running decodes, rows shift).
Reports the launch timer's host and host-CPU ms a launch, sequences a step and the share of
launches with prompt tokens; JSON + markdown to --out.
"""

import argparse
import json
import tempfile
from pathlib import Path

import torch

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.core.engine_times import ms_per_launch
from pipeline.engine.core.heap import frozen
from pipeline.synthetic.shapes import TINY
from scripts.engine_run import Workload
from scripts.model_shapes import (
    build_engine,
    random_hf_model,
    write_checkpoint,
    write_tokenizer,
)

SHAPES = ("lockstep", "staggered")


def tiny_engine_dir(out_dir: Path, batch: int, input_len: int, output_len: int) -> Path:
    model = random_hf_model(TINY, torch.float32, torch.device("cpu"))
    ckpt = write_checkpoint(model, "float32", out_dir / "ckpt")
    tokenizer = write_tokenizer(TINY["vocab_size"], out_dir / "tokenizer")
    work = Workload(input_len=input_len, output_len=output_len, max_batch_size=batch)
    return build_engine(ckpt, tokenizer, out_dir / "engine", work)


def stub_forward(engine: LLMEngine) -> None:
    """The model's forward returns fixed logits: what remains of a launch is the host's work."""
    logits = torch.zeros(engine.max_num_tokens, engine.model_runner.model.vocab_size)

    def forward(input_ids: torch.Tensor, meta, logits_rows: torch.Tensor | None) -> torch.Tensor:
        return logits[: input_ids.shape[0] if logits_rows is None else logits_rows.shape[0]]

    engine.model_runner.stage.forward = forward  # the launch loop calls the stage's forward


def run_shape(engine: LLMEngine, shape: str, batch: int, args: argparse.Namespace) -> dict:
    prompt = [1 + i % 200 for i in range(args.input_len)]
    running: set[str] = set()

    def add(max_tokens: int) -> None:
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        running.add(engine.add_request(prompt, params))

    def step() -> None:
        """Each finished request is replaced at once (a closed loop at a fixed concurrency)."""
        for delta in engine.step():
            if delta.finished:
                running.discard(delta.request_id)
                add(args.output_len)

    for i in range(batch):  # staggered: the first batch ends over a whole output length
        add(args.output_len if shape == "lockstep" else 1 + i * args.output_len // batch)
    for _ in range(args.warmup_launches):
        step()
    before = engine.stats()
    for _ in range(args.launches):
        step()
    after = engine.stats()
    for request_id in running:
        engine.abort(request_id)
    while engine.has_unfinished():
        engine.step()
    num = {k: after[k] - before[k] for k in ("num_launches", "num_steps", "num_prompt_steps")}
    return {
        "shape": shape,
        "batch": batch,
        "steps_a_launch": num["num_steps"] / max(1, num["num_launches"]),
        "seqs_per_step": (after["num_scheduled_seqs"] - before["num_scheduled_seqs"])
        / max(1, num["num_steps"]),
        "prompt_launch_share": num["num_prompt_steps"] / max(1, num["num_launches"]),
        **ms_per_launch(after, before),
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        "| shape | batch | host ms a launch | host CPU ms | sequences a step | steps a launch "
        "| launches with a prompt |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['batch']} | {r['host_ms_per_launch']:.3f} | "
            f"{r['host_cpu_ms_per_launch']:.3f} | {r['seqs_per_step']:.1f} | "
            f"{r['steps_a_launch']:.2f} | {100 * r['prompt_launch_share']:.0f}% |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--steps", type=int, default=3, help="decode steps a launch")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--launches", type=int, default=300, help="measured, a shape")
    parser.add_argument("--warmup-launches", type=int, default=100)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the stubbed forward leaves nothing to parallelize
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        max_batch = max(args.batch)
        engine_dir = tiny_engine_dir(Path(tmp), max_batch, args.input_len, args.output_len)
        engine = LLMEngine.from_engine_dir(
            engine_dir,
            device="cpu",
            overlap_scheduling=True,
            num_scheduler_steps=args.steps,
            num_kv_blocks=max_batch * -(-(args.input_len + args.output_len + args.steps) // 32),
        )
        stub_forward(engine)
        with frozen():  # as the served engine process does
            for batch in args.batch:
                for shape in SHAPES:
                    rows.append(run_shape(engine, shape, batch, args))
                    print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "host_step.json").write_text(json.dumps(rows, indent=2))
    (args.out / "host_step.md").write_text(markdown(rows))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
