"""Guided decoding on real SmolLM2 (xgrammar): a grammar that allows everything changes no
greedy token, constrained outputs follow their JSON schema / regex / choice and end where the
grammar does, and a batch mixing guided and free requests leaves the free ones' tokens as they
are alone. HF transformers' greedy tokens are the reference for the free rows."""

import json
import re

import jsonschema
import pytest
import torch

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.request.guided import GuidedDecoding, choice_guide, json_schema_guide

PROMPT = "Here is a JSON object describing a person:"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 10}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "role", "tags", "address"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine(smollm_engine_dir) -> LLMEngine:
    return LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu")


@pytest.fixture(scope="module")
def prompt(engine) -> list[int]:
    return engine.tokenizer.encode(PROMPT)


def test_a_grammar_allowing_everything_changes_no_greedy_token(engine, prompt):
    free = SamplingParams(max_tokens=12)
    anything = SamplingParams(max_tokens=12, guide=GuidedDecoding("regex", r"[\s\S]*"))
    plain = engine.generate([prompt], free)[0].token_ids
    assert engine.generate([prompt], anything)[0].token_ids == plain


def test_free_rows_match_hf_transformers_beside_guided_rows(engine, prompt, smollm_hf_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(smollm_hf_dir, dtype=torch.float32)
    expected = model.generate(
        torch.tensor([prompt]), max_new_tokens=10, do_sample=False, min_new_tokens=10
    )[0, len(prompt) :].tolist()
    free = SamplingParams(max_tokens=10, ignore_eos=True)
    guided = SamplingParams(max_tokens=40, guide=json_schema_guide(SCHEMA))
    out = engine.generate([prompt, prompt, prompt], [guided, free, guided])
    assert list(out[1].token_ids) == expected
    assert list(engine.generate([prompt], free)[0].token_ids) == expected


def test_json_schema_output_validates(engine, prompt):
    params = SamplingParams(max_tokens=96, guide=json_schema_guide(SCHEMA))
    out = engine.generate([prompt], params)[0]
    assert out.finish_reason == "stop", out.text
    jsonschema.validate(json.loads(out.text), SCHEMA)


def test_sampled_rows_follow_the_schema_too(engine, prompt):
    params = [
        SamplingParams(max_tokens=96, temperature=1.0, seed=s, guide=json_schema_guide(SCHEMA))
        for s in range(4)
    ]
    for out in engine.generate([prompt] * 4, params):
        assert out.finish_reason == "stop", out.text
        jsonschema.validate(json.loads(out.text), SCHEMA)


def test_regex_and_choice_end_where_the_grammar_does(engine, prompt):
    regex = r"[0-9]{3}-[a-z]{2,4}"
    choices = ["red apple", "green pear", "blue"]
    out = engine.generate(
        [prompt, prompt, prompt],
        [
            SamplingParams(max_tokens=20, guide=GuidedDecoding("regex", regex)),
            SamplingParams(max_tokens=20, guide=choice_guide(choices)),
            SamplingParams(max_tokens=20, ignore_eos=True, guide=choice_guide(choices)),
        ],
    )
    assert re.fullmatch(regex, out[0].text), out[0].text
    assert out[1].text in choices and out[1].finish_reason == "stop"
    assert out[2].text in choices and out[2].finish_reason == "stop"  # no end token needed


def test_a_grammar_that_does_not_compile_is_the_requests_error(engine, prompt):
    bad = SamplingParams(max_tokens=4, guide=GuidedDecoding("ebnf_grammar", "root ::= undefined"))
    with pytest.raises(ValueError, match="request: guided_decoding_guide"):
        engine.validate_request(prompt, bad)


def test_overlap_scheduling_reads_a_guided_rows_pending_token_for_its_bitmask(
    smollm_engine_dir, engine, prompt
):
    """With overlap scheduling a guided row's next launch is queued before its last token is
    read: the bitmask is filled after the matcher takes that token from the launch's host copy,
    and every step of the run has the guided rows in it."""
    overlap = LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu", overlap_scheduling=True)
    anything = SamplingParams(max_tokens=12, guide=GuidedDecoding("regex", r"[\s\S]*"))
    free = SamplingParams(max_tokens=12)
    assert overlap.generate([prompt], anything)[0].token_ids == (
        engine.generate([prompt], free)[0].token_ids
    )
    params = SamplingParams(max_tokens=96, guide=json_schema_guide(SCHEMA))
    steps_before = overlap.stats()["num_steps"]
    out = overlap.generate([prompt, prompt], [params, SamplingParams(max_tokens=8)])
    jsonschema.validate(json.loads(out[0].text), SCHEMA)
    assert list(out[1].token_ids) == list(
        engine.generate([prompt], SamplingParams(max_tokens=8))[0].token_ids
    )
    # one step a token (and the launch its end wastes): the guided row never sat a step out
    assert overlap.stats()["num_steps"] - steps_before <= len(out[0].token_ids) + 2


def test_compiled_grammars_are_reused(engine, prompt):
    guide = GuidedDecoding("regex", r"(yes|no)")
    engine.generate([prompt], SamplingParams(max_tokens=4, guide=guide))
    compiled = engine.grammar_compiler().num_compiled
    engine.generate([prompt] * 2, SamplingParams(max_tokens=4, guide=guide))
    assert engine.grammar_compiler().num_compiled == compiled


@pytest.mark.parametrize("overlap", [False, True])
def test_several_steps_a_launch_give_guided_rows_the_one_step_tokens(
    smollm_engine_dir, prompt, overlap
):
    """Launches of 4 steps fill a guided row's bitmask step by step from the step before's
    tokens: the same greedy tokens as one step a launch, beside a free row that keeps its own,
    in fewer launches than steps."""
    steps = LLMEngine.from_engine_dir(
        smollm_engine_dir, device="cpu", num_scheduler_steps=4, overlap_scheduling=overlap
    )
    guided = SamplingParams(max_tokens=40, guide=json_schema_guide(SCHEMA))
    free = SamplingParams(max_tokens=10)
    one = LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu", num_scheduler_steps=1)
    want = one.generate([prompt, prompt], [guided, free])
    launches_before = steps.stats()["num_launches"]
    got = steps.generate([prompt, prompt], [guided, free])
    assert [list(o.token_ids) for o in got] == [list(o.token_ids) for o in want]
    assert steps.stats()["num_launches"] - launches_before < len(got[0].token_ids)
