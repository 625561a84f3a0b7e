"""Benchmark requests: token-exact synthetic prompts (trtllm-bench's fixed ISL/OSL) or real text
from a corpus (by default gensim's Lee news corpus).

A request carries both the prompt text (what the server tokenizes) and its token ids (what direct
mode feeds the engine), so both paths see the same input.
"""

import random
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline import package_files
from pipeline.errors import ArtifactError, ConfigError

WORD = re.compile(r"^ [A-Za-z]{2,}$")


@dataclass(frozen=True, slots=True)
class BenchRequest:
    request_id: str
    prompt: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    ignore_eos: bool  # synthetic: run to exactly max_tokens; corpus: stop at EOS like real traffic


def lee_corpus_path() -> Path:
    return package_files.lee_corpus_path("bench: workload=corpus", "set bench.corpus_path")


def word_token_pool(tokenizer) -> list[int]:
    """Ids of tokens that decode to ' <letters>' and re-encode to themselves alone: joined, such
    tokens re-tokenize to exactly the same ids, so prompt lengths are exact through any server."""
    specials = set(tokenizer.all_special_ids)
    ids = [i for i in range(len(tokenizer)) if i not in specials]
    texts = tokenizer.batch_decode([[i] for i in ids])
    candidates = [(i, t) for i, t in zip(ids, texts, strict=True) if WORD.match(t)]
    encoded = tokenizer([t for _, t in candidates], add_special_tokens=False)["input_ids"]
    return [i for (i, _), enc in zip(candidates, encoded, strict=True) if enc == [i]]


def num_special_tokens(tokenizer) -> int:
    """How many tokens the tokenizer adds on its own (e.g. a BOS), as the server's preprocessing
    encodes with the tokenizer's defaults."""
    return len(tokenizer("x")["input_ids"]) - len(
        tokenizer("x", add_special_tokens=False)["input_ids"]
    )


class PromptMaker:
    """Builds requests for one tokenizer; the word-token pool is computed once (~1 s)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self._pool: list[int] | None = None
        self.num_special = num_special_tokens(tokenizer)

    @property
    def pool(self) -> list[int]:
        if self._pool is None:
            self._pool = word_token_pool(self.tokenizer)
        return self._pool

    def synthetic(
        self, num_requests: int, input_len: int, output_len: int, seed: int, prefix: str = "req"
    ) -> list[BenchRequest]:
        tokenizer, pool = self.tokenizer, self.pool
        num_content = input_len - self.num_special
        if num_content < 1 or len(pool) < 100:
            raise ConfigError(
                f"bench: cannot build token-exact prompts of bench.input_len="
                f"{input_len} with this tokenizer ({len(pool)} usable word tokens);"
                f" raise bench.input_len or use bench.workload=corpus"
            )
        rng = random.Random(seed)
        out = []
        for n in range(num_requests):
            for _ in range(10):
                text = "".join(tokenizer.decode([i]) for i in rng.choices(pool, k=num_content))
                ids = tokenizer(text)["input_ids"]
                if len(ids) == input_len:
                    break
            else:
                raise ArtifactError(
                    f"bench: synthetic prompt re-tokenizes to {len(ids)} tokens, "
                    f"not bench.input_len={input_len}; use "
                    f"bench.workload=corpus"
                )
            out.append(BenchRequest(f"{prefix}-{n}", text, tuple(ids), output_len, ignore_eos=True))
        return out

    def corpus(
        self,
        path: Path,
        num_requests: int,
        input_len: int,
        output_len: int,
        seed: int,
        prefix: str = "req",
    ) -> list[BenchRequest]:
        """Each prompt: a randomly chosen document (continued by the next ones when short), cut
        to input_len tokens at a token boundary; its length is re-measured after decoding."""
        tokenizer, docs = self.tokenizer, read_corpus(path)
        rng = random.Random(seed)
        out = []
        for n in range(num_requests):
            k = rng.randrange(len(docs))
            ids: list[int] = []
            while len(ids) < input_len:
                ids += tokenizer(docs[k % len(docs)] + " ", add_special_tokens=False)["input_ids"]
                k += 1
            text = tokenizer.decode(ids[: input_len - self.num_special])
            out.append(
                BenchRequest(
                    f"{prefix}-{n}",
                    text,
                    tuple(tokenizer(text)["input_ids"]),
                    output_len,
                    ignore_eos=False,
                )
            )
        return out

    def make(
        self,
        workload: str,
        corpus_path: str | None,
        num_requests: int,
        input_len: int,
        output_len: int,
        seed: int,
        prefix: str,
    ) -> list[BenchRequest]:
        if workload == "synthetic":
            return self.synthetic(num_requests, input_len, output_len, seed, prefix)
        if workload == "corpus":
            path = Path(corpus_path) if corpus_path else lee_corpus_path()
            return self.corpus(path, num_requests, input_len, output_len, seed, prefix)
        raise ConfigError(f"bench: bench.workload={workload!r} is unknown; use synthetic or corpus")


def read_corpus(path: Path) -> list[str]:
    if not path.is_file():
        raise ConfigError(f"bench: corpus file {path} not found; fix bench.corpus_path")
    docs = [
        line.strip()
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        if line.strip()
    ]
    if not docs:
        raise ConfigError(f"bench: corpus file {path} has no text lines; fix bench.corpus_path")
    return docs
