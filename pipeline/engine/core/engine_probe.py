"""The engine's proof that its weights are the ones it was built with: a fixed prompt's greedy
tokens and logits, recorded when the engine is built (probe.json in the engine dir, so its
manifest hashes it too) and run again each time a served engine starts, before it reports ready.

Why: the artifact check (manifest.verify_outputs) hashes only files whose size or mtime changed,
so a weights file corrupted in place with its mtime put back passes it; the probe runs the model.

The probe is NUM_TOKENS greedy steps, each a prefill of the prompt and the tokens so far on a
scratch KV cache (LLMEngine.prompt_logits: the engine's counters and KV blocks are untouched);
the last prefill's logits from the prompt's last position on give each step's scores. Its cost
at each start: NUM_TOKENS prefills of under 10 tokens (for SmolLM2-135M in float32 on a 2-core CPU
shared with other work, 2-3 s each, as much as one 4-token generate there).

Exact or close: on the device (CPU, or the GPU's model) and dtype the probe was recorded with, the
tokens must be the same and each step's top logits equal up to EXACT_TOLERANCE (a CPU's matmul
may split its sums by thread count, so bits may differ); on another device or dtype (built on the
CPU in float32, served on a GPU in bfloat16; or on another GPU model, whose kernels sum in
another order) each step's top logit may move by TOLERANCE[dtype] of the logits' spread there,
and the tokens must agree up to the first step whose recorded top-2 margin is within that
tolerance (a near tie may go either way). Non-finite logits always fail, and so does a non-finite
weight anywhere in the rank's model when the build had none.
"""

import json
import logging
from pathlib import Path

import torch

from pipeline.errors import ArtifactError

log = logging.getLogger(__name__)

PROBE_FILE = "probe.json"
PROMPT = "The capital of France is"
NUM_TOKENS = 4
# a step's top logit may differ by this fraction of the logits' spread (std over the vocabulary):
# on the recorded device and dtype, and, by the less precise dtype of the two, on another
EXACT_TOLERANCE = 1e-3
# measured, SmolLM2-135M built in float32 on a CPU, probed there in float16 / bfloat16: at most
# 0.007 / 0.045 of the spread; float32 elsewhere (another device's kernels) gets float16's
TOLERANCE = {"float32": 0.05, "float16": 0.05, "bfloat16": 0.2}
_PRECISION = ("float32", "float16", "bfloat16")  # most precise first


def run_probe(engine, prompt_token_ids: list[int] | None = None) -> dict:
    """The probe on this engine (an LLMEngine): the prompt's greedy tokens, each step's top-2
    logits and logits' spread, and the device type and dtype it ran on."""
    # a toy vocabulary may have no tokens for the prompt's text: token 0 then
    prompt = list(prompt_token_ids or engine.tokenizer.encode(PROMPT) or [0])
    tokens: list[int] = []
    for _ in range(NUM_TOKENS):
        logits = engine.prompt_logits([prompt + tokens])[0]  # [S, V]
        tokens.append(int(logits[-1].argmax()))
    # [NUM_TOKENS, V]: the last prefill (all but the last token) holds every step's scores
    steps = logits[len(prompt) - 1 :].float().cpu()
    top2 = steps.topk(2, dim=-1).values
    runner = engine.model_runner
    # the prompt reaches a few embedding rows only: a NaN or inf anywhere else (a row of another
    # token) is found by looking, one pass over this rank's weights
    weights = runner.model.state_dict().values()
    return {
        "prompt_token_ids": prompt,
        "token_ids": tokens,
        "top2_logits": top2.tolist(),
        "spread": steps.std(dim=-1).tolist(),
        "is_finite": bool(torch.isfinite(steps).all()),
        "are_weights_finite": all(
            bool(torch.isfinite(w).all()) for w in weights if w.is_floating_point()
        ),
        "device": runner.device.type,
        "device_name": _device_name(runner.device),
        "dtype": str(runner.dtype).removeprefix("torch."),
    }


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def record_probe(engine, engine_dir: Path) -> dict:
    """Run the probe and write it to engine_dir/probe.json (at build); ArtifactError when the
    model's logits are not finite (nothing worth serving was built)."""
    probe = run_probe(engine)
    if not probe["is_finite"]:
        raise ArtifactError(
            f"build: the engine in {engine_dir} gives non-finite logits for the probe prompt "
            f"{PROMPT!r}; its checkpoint is broken: re-run convert (or quantize) with force=true"
        )
    (Path(engine_dir) / PROBE_FILE).write_text(json.dumps(probe, indent=2))
    return probe


def tolerance(recorded: dict, probe: dict) -> float:
    """The fraction of the logits' spread a step's top logit may move by, here."""
    dtype = probe["dtype"]
    if recorded["device_name"] == probe["device_name"] and recorded["dtype"] == dtype:
        return EXACT_TOLERANCE
    both = [d for d in (recorded["dtype"], dtype) if d in _PRECISION]
    least = max(both, key=_PRECISION.index, default="bfloat16")
    return TOLERANCE[least]


def mismatch(recorded: dict, probe: dict) -> str | None:
    """Why `probe` (run here) is not the engine `recorded` at build; None when it is."""
    if not probe["is_finite"]:
        return "its logits are not finite"
    if recorded["are_weights_finite"] and not probe["are_weights_finite"]:
        return "a weight is NaN or infinite, none was at build"
    tol = tolerance(recorded, probe)
    for step, token in enumerate(recorded["token_ids"]):
        (top, second), (now, _) = recorded["top2_logits"][step], probe["top2_logits"][step]
        allowed = tol * recorded["spread"][step]
        if abs(now - top) > allowed:
            return (
                f"greedy step {step}: top logit {now:.4g}, recorded {top:.4g} (allowed "
                f"+-{allowed:.3g} on {probe['device']}/{probe['dtype']}, recorded on "
                f"{recorded['device']}/{recorded['dtype']})"
            )
        if probe["token_ids"][step] != token:
            if top - second <= 2 * allowed:  # a near tie: the rest of the text may differ
                return None
            return f"greedy step {step}: token {probe['token_ids'][step]}, recorded {token}"
    return None


def check_probe(engine, engine_dir: Path) -> None:
    """Before a served engine reports ready: its probe gives what was recorded at build, or an
    ArtifactError (one line) naming the engine dir, its weights and the fix."""
    engine_dir = Path(engine_dir)
    path = engine_dir / PROBE_FILE
    if not path.is_file():  # built before the probe existed: nothing to compare with
        log.warning("%s: no %s (an older build); serving it unchecked", engine_dir, PROBE_FILE)
        return
    recorded = json.loads(path.read_text())
    why = mismatch(recorded, run_probe(engine, recorded["prompt_token_ids"]))
    if why is not None:
        weights = ", ".join(sorted(p.name for p in engine_dir.glob("rank*.safetensors")))
        raise ArtifactError(
            f"engine {engine_dir}: {weights} no longer give(s) the build's probe ({why}): "
            f"corrupted since it was built; rebuild it with `python -m pipeline build "
            f"force=true` and the overrides that made it"
        )
