"""Prompts from the real SmolLM2 tokenizer: synthetic ones re-tokenize to exactly input_len."""

import pytest
from transformers import AutoTokenizer

from pipeline.bench.workload import PromptMaker, lee_corpus_path, read_corpus
from pipeline.errors import ConfigError


@pytest.fixture(scope="module")
def maker(smollm_hf_dir):
    return PromptMaker(AutoTokenizer.from_pretrained(smollm_hf_dir))


@pytest.mark.parametrize("input_len", [1, 16, 128])
def test_synthetic_prompts_are_token_exact_and_seeded(maker, input_len):
    requests = maker.synthetic(5, input_len, 7, seed=1)
    for request in requests:
        assert len(request.prompt_token_ids) == input_len
        assert list(request.prompt_token_ids) == maker.tokenizer(request.prompt)["input_ids"]
        assert request.max_tokens == 7 and request.ignore_eos
    assert len({r.prompt for r in requests}) == 5
    assert [r.prompt for r in maker.synthetic(5, input_len, 7, seed=1)] == [
        r.prompt for r in requests
    ]


def test_corpus_prompts_are_real_text_cut_near_input_len(maker):
    requests = maker.corpus(lee_corpus_path(), 4, 48, 5, seed=0, prefix="c")
    docs = read_corpus(lee_corpus_path())
    for request in requests:
        assert abs(len(request.prompt_token_ids) - 48) <= 2  # re-measured after decoding
        assert not request.ignore_eos and request.request_id.startswith("c-")
        assert any(doc.startswith(request.prompt[:40]) for doc in docs)


def test_bad_workload_and_corpus_give_config_errors(maker, tmp_path):
    with pytest.raises(ConfigError, match="bench.workload"):
        maker.make("sharegpt", None, 1, 8, 8, 0, "r")
    with pytest.raises(ConfigError, match="bench.corpus_path"):
        maker.make("corpus", str(tmp_path / "none.txt"), 1, 8, 8, 0, "r")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(ConfigError, match="no text lines"):
        maker.make("corpus", str(empty), 1, 8, 8, 0, "r")
