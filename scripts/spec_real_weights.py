"""SmolLM2-135M's real weights in the torch engine, for scripts.bench_spec_decode.

The GGUF is read as the pipeline's fetch reads it (pipeline.gguf_import: transformers dequantizes
it), converted and built by the pipeline's own converter and torch build. Draft models are cut
from the same weights: the first N transformer blocks, the final norm and the head (N/30 of a
step's work, the target's tokenizer). Prompts are real English text (scripts.spec_text) in the
model's chat template.

Each speculation setting is swapped into one loaded engine as a fresh Speculator, instead of a
load per setting: the engine is loaded with the largest k (the runner sizes its token buffers for
1 + k tokens a row), and a draft model's engine is loaded per setting (its steps a launch are k).
"""

import dataclasses
import logging
import shutil
import time
from pathlib import Path

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.engine_config import EngineConfig, load_engine_config
from pipeline.engine.spec.speculator import make_speculator
from pipeline.engine.spec_config import SpecConfig, spec_config
from pipeline.gguf_import import gguf_to_hf
from scripts import spec_text
from scripts.engine_run import Workload, free_memory, sync
from scripts.model_shapes import build_engine, write_checkpoint

log = logging.getLogger("bench_spec_decode")
COUNTS = ("spec_num_verify_rows", "spec_num_drafted_tokens", "spec_num_accepted_tokens")


@dataclasses.dataclass(frozen=True)
class Setting:
    """One speculation setting of the batch-1 table."""

    method: str  # prompt_lookup | draft_model
    k: int
    adaptive: bool
    draft_layers: int = 0  # draft_model: the target's first blocks kept
    task: str = "copy"  # the prompts: copy (repeat a passage) or chat (ordinary)

    @property
    def name(self) -> str:
        draft = f" N={self.draft_layers}" if self.method == "draft_model" else ""
        return f"{self.method}{draft} k={self.k}{' adaptive' if self.adaptive else ''}"


@dataclasses.dataclass
class RealModel:
    tokenizer: object  # transformers' tokenizer of the GGUF, with its chat template
    num_layers: int
    vocab_size: int
    engines: dict[int, Path]  # blocks kept -> engine dir (num_layers: the target)


def real_engines(
    gguf: Path, draft_layers: tuple[int, ...], dtype: str, work: Workload, scratch: Path
) -> RealModel:
    """The target's engine and a draft engine per entry of draft_layers, all with the build
    limits of `work` (a draft's must cover the target's)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf_dir = scratch / "smollm2-hf"
    gguf_to_hf(gguf, hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir)  # float32, as gguf_to_hf saved it
    num_layers = model.config.num_hidden_layers
    engines = {}
    for n in (num_layers, *draft_layers):
        log.info("smollm2 real weights: engine of %d of %d blocks", n, num_layers)
        ckpt = write_checkpoint(model, dtype, scratch / f"smollm2-ckpt-{n}", num_layers=n)
        engines[n] = build_engine(ckpt, hf_dir, scratch / f"smollm2-engine-{n}", work)
        shutil.rmtree(ckpt)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    vocab_size = model.config.vocab_size
    del model
    free_memory()
    return RealModel(tokenizer, num_layers, vocab_size, engines)


def chat_prompts(tokenizer, texts) -> list[list[int]]:
    """Each text as one user turn in the model's chat template, ready for the answer."""
    prompts = []
    for text in texts:
        chat = [{"role": "user", "content": text}]
        rendered = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        prompts.append(tokenizer(rendered, add_special_tokens=False)["input_ids"])
    return prompts


def copy_prompts(tokenizer) -> list[list[int]]:
    return chat_prompts(
        tokenizer, [spec_text.COPY_TEMPLATE.format(passage=p) for p in spec_text.PASSAGES]
    )


def load(
    engine_dir: Path, device: str, dtype: str, runtime: dict
) -> tuple[LLMEngine, EngineConfig]:
    config = load_engine_config(engine_dir, device, {"dtype": dtype, **runtime})
    return LLMEngine(config), config


def set_speculation(engine: LLMEngine, config: EngineConfig, spec: SpecConfig | None) -> None:
    """Replace the engine's speculator (None: off); its acceptance counts start at zero."""
    if engine.speculator is not None:
        engine.speculator.close()
        engine.speculator = None
        free_memory()
    if spec is not None:
        engine.speculator = make_speculator(dataclasses.replace(config, speculation=spec))


def decode_rate(engine: LLMEngine, prompts: list[list[int]], max_tokens: int) -> dict:
    """Batch-1 greedy decode of each prompt in turn to its end (EOS or max_tokens): tokens after
    the first launch's over the time after it, summed; the speculator's counts over the run."""
    params = SamplingParams(max_tokens=max_tokens)
    engine.generate([prompts[0]], SamplingParams(max_tokens=8))  # warm-up (a new draft engine)
    before = engine.stats()
    tokens, seconds, outputs = 0, 0.0, []
    for prompt in prompts:
        sync(engine.model_runner.device)
        out = engine.generate([prompt], params)[0]
        first = min(engine.num_scheduler_steps, len(out.token_ids))
        tokens += len(out.token_ids) - first
        seconds += out.finish_time_s - out.first_token_time_s
        outputs.append(out.token_ids)
    after = engine.stats()
    rows, drafted, accepted = (after[k] - before[k] for k in COUNTS)
    return {
        "tok_s": tokens / seconds if seconds > 0 else 0.0,
        "num_tokens": sum(len(o) for o in outputs),
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "mean_accepted_tokens": accepted / rows if rows else 0.0,
        "outputs": outputs,
    }


def spec_of(
    setting: Setting, draft_dir: Path | None, max_batch_size: int, kv_blocks: int
) -> SpecConfig:
    value = {
        "method": setting.method,
        "num_draft_tokens": setting.k,
        "adaptive": setting.adaptive,
        "max_batch_size": max_batch_size,
    }
    if setting.method == "draft_model":
        value.update(draft_engine_dir=str(draft_dir), draft_num_kv_blocks=kv_blocks)
    return spec_config(value, "bench_spec_decode")


def batch1_table(
    real: RealModel, settings: list[Setting], args, max_tokens: dict[str, int], kv_blocks: int
) -> list[dict]:
    """Each setting's batch-1 decode against off on its task's prompts, both sides on an engine
    loaded with the same runtime options (one request at a time, kv_blocks KV blocks)."""
    target = real.engines[real.num_layers]
    tasks = {
        "copy": copy_prompts(real.tokenizer)[: args.num_prompts],
        "chat": chat_prompts(real.tokenizer, spec_text.CHAT_PROMPTS)[: args.num_prompts],
    }
    runtime = {"max_batch_size": 1, "num_kv_blocks": kv_blocks}
    engine, _ = load(target, args.device, args.dtype, runtime)
    off = {task: decode_rate(engine, prompts, max_tokens[task]) for task, prompts in tasks.items()}
    log.info("batch-1 off: %s", {t: round(r["tok_s"], 1) for t, r in off.items()})
    del engine
    free_memory()
    widest = {"method": "prompt_lookup", "num_draft_tokens": max(s.k for s in settings)}
    engine, config = load(target, args.device, args.dtype, {**runtime, "speculation": widest})
    rows = []
    for setting in settings:
        task = setting.task
        draft_dir = real.engines.get(setting.draft_layers)
        set_speculation(engine, config, spec_of(setting, draft_dir, 1, kv_blocks))
        start = time.perf_counter()
        on = decode_rate(engine, tasks[task], max_tokens[task])
        row = {
            "setting": setting.name,
            **dataclasses.asdict(setting),
            "off_tok_s": off[task]["tok_s"],
            "on_tok_s": on["tok_s"],
            "speedup": on["tok_s"] / off[task]["tok_s"],
            "acceptance_rate": on["acceptance_rate"],
            "mean_accepted_tokens": on["mean_accepted_tokens"],
            "num_tokens": on["num_tokens"],
            # greedy speculation is exact: the prompts whose tokens equal off's (bf16 verify
            # steps may break a near-tie otherwise)
            "same_tokens_as_off": sum(
                a == b for a, b in zip(on["outputs"], off[task]["outputs"], strict=True)
            )
            / len(tasks[task]),
        }
        log.info("%s: %s (%.1f s)", setting.name, row, time.perf_counter() - start)
        rows.append(row)
    set_speculation(engine, config, None)
    del engine
    free_memory()
    return rows


def best(rows: list[dict]) -> dict[str, dict]:
    """The fastest row of each method on each task, by "method/task"."""
    out = {}
    for row in rows:
        key = f"{row['method']}/{row['task']}"
        if key not in out or row["speedup"] > out[key]["speedup"]:
            out[key] = row
    return out


def settings_of(args) -> list[Setting]:
    """Prompt lookup on the copy task at each k, fixed, and adaptive at the largest (also on
    the chat prompts: what it finds there); each draft model on the chat prompts at each k,
    fixed, and adaptive at the largest."""
    k = max(args.lookup_k)
    lookup = [Setting("prompt_lookup", k, False) for k in args.lookup_k]
    lookup += [Setting("prompt_lookup", k, True), Setting("prompt_lookup", k, True, task="chat")]
    drafts = []
    for n in args.draft_layers:
        drafts += [Setting("draft_model", k, False, n, "chat") for k in args.draft_k]
        drafts.append(Setting("draft_model", max(args.draft_k), True, n, "chat"))
    return lookup + drafts


def batch1_markdown(rows: list[dict]) -> list[str]:
    lines = [
        "",
        "Batch-1 greedy decode, real prompts (copy: repeat a passage; chat: ordinary prompts):",
        "",
        "| setting | task | off tok/s | on tok/s | on / off | acceptance | accepted / step "
        "| same tokens as off |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['setting']} | {r['task']} | {r['off_tok_s']:.0f} | {r['on_tok_s']:.0f} | "
            f"{r['speedup']:.2f}x | {r['acceptance_rate']:.3f} | "
            f"{r['mean_accepted_tokens']:.2f} | {r['same_tokens_as_off']:.2f} |"
        )
    return lines
