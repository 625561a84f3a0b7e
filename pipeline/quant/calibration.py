"""Calibration and held-out evaluation windows, cut deterministically from one text.

The text is tokenized once and cut into consecutive windows of `seq_len` tokens. The last
`eval_size` windows are held out for perplexity; calibration samples `calib_size` of the windows
before them with a seeded permutation, so the two sets never share a token.
"""

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from pipeline.errors import ConfigError
from pipeline.package_files import lee_corpus_path

log = logging.getLogger(__name__)

DEFAULT_DATASET = "lee_background"
HF_TEXT_COLUMNS = ("text", "article", "content")


@dataclass(frozen=True, slots=True)
class Windows:
    calib: torch.Tensor  # [calib_size, seq_len] token ids
    eval: torch.Tensor  # [eval_size, seq_len] token ids, disjoint from calib
    source: str  # where the text came from (file path or dataset id)
    num_text_tokens: int


def check_sizes(quant) -> None:
    problems = [
        f"quant.{key} must be >= {low} (got {getattr(quant, key)})"
        for key, low in (("calib_size", 1), ("seq_len", 2), ("batch_size", 1), ("eval_size", 1))
        if getattr(quant, key) < low
    ]
    if problems:
        raise ConfigError("quantize: " + "; ".join(problems))


def lee_background_path() -> Path:
    return lee_corpus_path(
        "quantize: quant.calib_dataset=lee_background",
        "set quant.calib_dataset to a .txt/.jsonl file",
    )


def _read_jsonl(path: Path) -> str:
    docs = []
    for num, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"quantize: {path}:{num}: invalid JSON ({exc}); each line of "
                f'quant.calib_dataset must be an object with a "text" field'
            ) from exc
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise ConfigError(
                f'quantize: {path}:{num}: no string "text" field; each line of '
                f'quant.calib_dataset must look like {{"text": "..."}}'
            )
        docs.append(record["text"])
    return "\n\n".join(docs)


def _read_hf_dataset(spec: str) -> str:
    dataset_id, _, config = spec.removeprefix("hf:").partition(":")
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            f"quantize: quant.calib_dataset={spec!r} needs the `datasets` package "
            f"(pip install datasets) or use a local .txt/.jsonl file"
        ) from None
    try:
        data = datasets.load_dataset(dataset_id, config or None, split="train")
    except Exception as exc:  # hub, network and format failures all mean "unusable here"
        raise ConfigError(
            f"quantize: quant.calib_dataset={spec!r} could not be loaded ({exc}); "
            f"without hub access use a local .txt/.jsonl file or lee_background"
        ) from exc
    column = next((c for c in HF_TEXT_COLUMNS if c in data.column_names), None)
    if column is None:
        raise ConfigError(
            f"quantize: dataset {dataset_id!r} has no text column (looked for "
            f"{', '.join(HF_TEXT_COLUMNS)}; it has {', '.join(data.column_names)})"
        )
    return "\n\n".join(data[column])


def dataset_file(dataset: str) -> Path | None:
    """The local file behind quant.calib_dataset (None for hf:<id>); refuses a missing one."""
    if dataset == DEFAULT_DATASET:
        return lee_background_path()
    if dataset.startswith("hf:"):
        return None
    path = Path(dataset).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"quantize: quant.calib_dataset={dataset!r}: no such file; use an "
            f"existing .txt or .jsonl file, {DEFAULT_DATASET}, or hf:<dataset id>"
        )
    return path.resolve()


def load_text(dataset: str) -> tuple[str, str]:
    """(text, source) for quant.calib_dataset."""
    path = dataset_file(dataset)
    if path is None:
        return _read_hf_dataset(dataset), dataset
    text = _read_jsonl(path) if path.suffix == ".jsonl" else path.read_text(encoding="utf-8")
    return text, str(path)


def cut_windows(token_ids: list[int], quant, source: str) -> Windows:
    seq_len = quant.seq_len
    num_windows = len(token_ids) // seq_len
    num_pool = num_windows - quant.eval_size
    if num_pool < quant.calib_size:
        raise ConfigError(
            f"quantize: {source} has {len(token_ids)} tokens = {num_windows} windows of "
            f"quant.seq_len={seq_len}; quant.calib_size={quant.calib_size} + "
            f"quant.eval_size={quant.eval_size} need more; lower quant.calib_size, quant.eval_size "
            f"or quant.seq_len, or use a longer quant.calib_dataset"
        )
    ids = torch.tensor(token_ids[: num_windows * seq_len], dtype=torch.long)
    all_windows = ids.view(num_windows, seq_len)  # [num_windows, seq_len]
    generator = torch.Generator().manual_seed(quant.seed)
    picked = torch.randperm(num_pool, generator=generator)[: quant.calib_size]
    return Windows(
        calib=all_windows[picked].clone(),
        eval=all_windows[num_pool:].clone(),
        source=source,
        num_text_tokens=len(token_ids),
    )


def build_windows(tokenizer, quant) -> Windows:
    text, source = load_text(quant.calib_dataset)
    token_ids = tokenizer(text)["input_ids"]
    log.info("calibration text: %s (%d tokens)", source, len(token_ids))
    return cut_windows(token_ids, quant, source)


def batches(windows: torch.Tensor, batch_size: int, desc: str) -> Iterator[torch.Tensor]:
    """[N, S] -> [batch_size, S] slices, with a progress bar."""
    starts = range(0, windows.shape[0], batch_size)
    for start in tqdm(starts, desc=desc, unit="batch"):
        yield windows[start : start + batch_size]
