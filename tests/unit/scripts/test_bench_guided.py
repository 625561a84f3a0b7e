"""scripts.bench_guided --tiny: the GPU acceptance run's code path on CPU (a subprocess, as the
GPU machine runs it): both sides at each batch size, every token generated under the schema,
and the byte-level tokenizer it builds covers the vocabulary."""

import json

import pytest

from scripts.byte_tokenizer import write_byte_tokenizer
from tests.conftest import run_tiny_script


def test_byte_tokenizer_spells_any_text_in_a_vocabulary_of_the_given_size(tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(write_byte_tokenizer(300, tmp_path))
    assert len(tokenizer) == 300 and tokenizer.eos_token_id == 299
    text = '{"items": [{"id": 7, "name": "é x"}]}'
    assert tokenizer.decode(tokenizer.encode(text)) == text


@pytest.mark.slow
def test_bench_guided_tiny_measures_guided_against_free(tmp_path):
    run_tiny_script("scripts.bench_guided", tmp_path)
    results = json.loads((tmp_path / "bench_guided.json").read_text())
    rows = results["models"]["tiny"]["batches"]
    assert sorted(rows, key=int) == ["1", "4"]
    for batch, row in rows.items():
        for side in ("free", "guided"):
            # the schema's minItems keeps every guided request going to max_tokens
            assert row[side]["num_out_tokens"] == int(batch) * results["workload"]["output_len"]
            assert row[side]["finish_reasons"] == {"length": int(batch)}
        assert row["ratio"] > 0
    assert "| tiny | 64" not in (tmp_path / "bench_guided.md").read_text()
    assert not (tmp_path / "scratch").exists()
