"""The accuracy probes every cell runs, cut once from held-out text: the quantize gate's
evaluation region (the last quant.eval_size windows of quant.seq_len tokens of
quant.calib_dataset), which calibration never sees.

- cloze: a context of held-out text, the next word and num_choices - 1 other words of that text;
  each choice is one token (a whole word: ' <letters>'), so the choice the model scores highest
  is its most likely next token among them;
- perplexity windows: consecutive windows of the same region;
- greedy prompts: starts of that region, continued greedily for a fixed number of tokens.
"""

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.bench.workload import word_token_pool
from pipeline.errors import ConfigError
from pipeline.quant.calibration import build_windows

PROBES_FILE = "probes.json"

SEED = 0


@dataclass(frozen=True, slots=True)
class ClozeItem:
    context: list[int]
    choices: list[int]  # one token each
    answer: int  # index into choices


@dataclass(frozen=True, slots=True)
class Probes:
    cloze: list[ClozeItem]
    ppl_windows: list[list[int]]
    greedy_prompts: list[list[int]]
    source: str

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Probes":
        return cls(
            [ClozeItem(**item) for item in data["cloze"]],
            data["ppl_windows"],
            data["greedy_prompts"],
            data["source"],
        )

    @classmethod
    def read(cls, path: Path) -> "Probes":
        return cls.from_json(json.loads(Path(path).read_text()))


def held_out_tokens(tokenizer, quant) -> tuple[list[int], str]:
    """The gate's evaluation windows of its text, as one run of token ids."""
    windows = build_windows(tokenizer, quant)
    return windows.eval.flatten().tolist(), windows.source


def cloze_items(ids: list[int], word_ids: set[int], accuracy, rng: random.Random) -> list:
    ctx, k = accuracy.cloze_context_tokens, accuracy.num_choices
    words = sorted({t for t in ids if t in word_ids})
    positions = [p for p in range(ctx, len(ids)) if ids[p] in word_ids]
    if len(words) < k or len(positions) < accuracy.num_cloze_items:
        raise ConfigError(
            f"study: the held-out text has {len(positions)} word positions and {len(words)} "
            f"distinct words; study.accuracy.num_cloze_items={accuracy.num_cloze_items} with "
            f"num_choices={k} need more; lower them or raise quant.eval_size"
        )
    items = []
    for p in sorted(rng.sample(positions, accuracy.num_cloze_items)):
        others = rng.sample([w for w in words if w != ids[p]], k - 1)
        choices = [ids[p], *others]
        rng.shuffle(choices)
        items.append(ClozeItem(ids[p - ctx : p], choices, choices.index(ids[p])))
    return items


def build_probes(tokenizer, quant, accuracy) -> Probes:
    ids, source = held_out_tokens(tokenizer, quant)
    n, size = accuracy.num_ppl_windows, accuracy.ppl_window_tokens
    g, glen = accuracy.num_greedy_prompts, accuracy.greedy_prompt_tokens
    if len(ids) < max(n * size, g * glen, accuracy.cloze_context_tokens + 1):
        raise ConfigError(
            f"study: the held-out text ({source}) has {len(ids)} tokens; "
            f"study.accuracy needs {n} x {size} for perplexity and {g} x {glen} for greedy "
            f"prompts; lower them or raise quant.eval_size / quant.seq_len"
        )
    rng = random.Random(SEED)
    stride = len(ids) // max(g, 1)
    return Probes(
        cloze=cloze_items(ids, set(word_token_pool(tokenizer)), accuracy, rng),
        ppl_windows=[ids[i * size : (i + 1) * size] for i in range(n)],
        greedy_prompts=[ids[i * stride : i * stride + glen] for i in range(g)],
        source=source,
    )
