"""Beam search on real SmolLM2 (fp32): the engine's beams are transformers' beams
(`generate(num_beams=W, num_return_sequences=W)`), token for token and in the same order, for
widths 2 and 4 and several length_penalty / early_stopping settings; greedy requests batched
with a beam request keep their tokens; forked beams share the prompt's KV blocks."""

import numpy as np
import pytest
import torch

from pipeline.engine import LLMEngine, SamplingParams
from tests.conftest import hf_greedy_tokens

# chat prompts whose beams end (eos) at different lengths, so the settings rank them apart
QUESTIONS = ("What is 2+2? Reply with just the number.", "Say hi.")
NUM_TOKENS = 12
# (length_penalty, early_stopping as TensorRT-LLM's integer, transformers' early_stopping)
SETTINGS = ((1.0, 1, True), (0.5, 0, False), (2.0, 2, "never"), (-1.0, 0, False))


@pytest.fixture(scope="module")
def engine(smollm_beam_engine_dir) -> LLMEngine:
    return LLMEngine.from_engine_dir(smollm_beam_engine_dir, device="cpu")


@pytest.fixture(scope="module")
def prompts(engine) -> list[list[int]]:
    chats = [[{"role": "user", "content": q}] for q in QUESTIONS]
    encoded = [engine.tokenizer.apply_chat_template(c, add_generation_prompt=True) for c in chats]
    return [list(e if isinstance(e, list) else e["input_ids"]) for e in encoded]


@pytest.fixture(scope="module")
def hf_model(smollm_hf_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(smollm_hf_dir, dtype=torch.float32).eval()


def hf_beams(model, ids, width, length_penalty, early_stopping, eos) -> list[list[int]]:
    """transformers' W beams, best first, each cut before its end token (the engine drops it)."""
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids)),
            num_beams=width,
            num_return_sequences=width,
            do_sample=False,
            length_penalty=length_penalty,
            early_stopping=early_stopping,
            max_new_tokens=NUM_TOKENS,
            pad_token_id=eos[0],
        )
    beams = []
    for row in out[:, len(ids) :].tolist():
        beams.append(row[: next((i for i, t in enumerate(row) if t in eos), len(row))])
    return beams


@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("setting", SETTINGS, ids=["es1", "es0", "never", "short"])
def test_beams_are_transformers_beams(engine, prompts, hf_model, width, setting):
    length_penalty, early_stopping, hf_early_stopping = setting
    eos = engine.eos_token_ids
    for ids in prompts:
        params = SamplingParams(
            max_tokens=NUM_TOKENS,
            beam_width=width,
            length_penalty=length_penalty,
            early_stopping=early_stopping,
            logprobs=0,
        )
        out = engine.generate([ids], params)[0]
        expected = hf_beams(hf_model, ids, width, length_penalty, hf_early_stopping, eos)
        assert [list(b.token_ids) for b in out.beams] == expected
        assert list(out.token_ids) == expected[0]
        scores = [b.score for b in out.beams]
        assert scores == sorted(scores, reverse=True)
        for beam in out.beams:  # the kept tokens' log probabilities sum to at most the total
            assert len(beam.logprobs) == len(beam.token_ids)
            assert sum(beam.logprobs) == pytest.approx(beam.cum_logprob, abs=1e-3) or (
                beam.finish_reason == "stop" and sum(beam.logprobs) > beam.cum_logprob
            )


def test_greedy_requests_beside_a_beam_request_keep_their_tokens(engine, prompts, smollm_hf_dir):
    greedy = SamplingParams(max_tokens=NUM_TOKENS)
    beams = SamplingParams(max_tokens=NUM_TOKENS, beam_width=4)
    out = engine.generate([prompts[0], prompts[1], prompts[0]], [greedy, beams, greedy])
    expected = hf_greedy_tokens(smollm_hf_dir, [prompts[0]], engine.eos_token_ids, NUM_TOKENS)
    assert list(out[0].token_ids) == expected[0] == list(out[2].token_ids)
    assert out[0].beams is None and len(out[1].beams) == 4
    assert engine.scheduler.block_manager.num_free_blocks == engine.stats()["num_total_blocks"]


def test_beam_width_above_the_build_is_refused(engine):
    with pytest.raises(ValueError, match="max_beam_width=4"):
        engine.generate(["Hi"], SamplingParams(max_tokens=4, beam_width=5))
    with pytest.raises(ValueError, match="temperature"):
        engine.generate(["Hi"], SamplingParams(max_tokens=4, beam_width=2, temperature=0.7))


def test_forked_beams_share_the_prompt_blocks_and_copy_the_partial_one(engine, prompts):
    ids = prompts[0]
    size = engine.scheduler.block_manager.block_size
    assert len(ids) % size  # the prompt ends inside a block
    engine.add_request(ids, SamplingParams(max_tokens=NUM_TOKENS, beam_width=4), "fork")
    handle = engine.scheduler.waiting[-1]
    while not handle.beam.has_forked:
        engine.step()
    blocks, beams = engine.scheduler.block_manager, handle.beam.beams
    num_full = len(ids) // size
    prompt_blocks = blocks.block_table(beams[0])[:num_full]
    for beam in beams:
        assert blocks.block_table(beam)[:num_full] == prompt_blocks
    assert all(blocks.ref_count(b) == 4 for b in prompt_blocks)
    copies = np.array(blocks._copies)
    assert len(copies) == 4 and len(set(copies[:, 0].tolist())) == 1  # the prompt's last block
    engine.step()  # the copies run before this step's forward, which writes one slot past them
    kv = engine.model_runner.kv_cache
    filled = len(ids) % size
    for source, dest in copies.tolist():
        assert torch.equal(kv[:, :, dest, :filled], kv[:, :, source, :filled])
    while engine.has_unfinished():
        engine.step()
    assert blocks.num_free_blocks == blocks.num_total_blocks


def test_a_cancelled_beam_request_frees_its_beams(engine, prompts):
    engine.add_request(prompts[0], SamplingParams(max_tokens=NUM_TOKENS, beam_width=4), "gone")
    engine.add_request(prompts[1], SamplingParams(max_tokens=NUM_TOKENS), "stays")
    handle = engine.scheduler.waiting[0]
    while not handle.beam.has_forked:
        engine.step()
    engine.step()
    assert engine.abort("gone")
    deltas = []
    while engine.has_unfinished():
        deltas += engine.step()
    assert [d.finish_reason for d in deltas if d.request_id == "gone"] == ["cancelled"]
    assert any(d.finished and d.request_id == "stays" for d in deltas)
    assert engine.scheduler.beams.num_requests == 0 and not engine.scheduler.running
    blocks = engine.scheduler.block_manager
    assert blocks.num_free_blocks == blocks.num_total_blocks


def test_beams_without_prefix_caching(smollm_beam_engine_dir, prompts, hf_model):
    """The plain block manager shares and frees forked blocks by its own holder counts."""
    engine = LLMEngine.from_engine_dir(
        smollm_beam_engine_dir, device="cpu", enable_prefix_caching=False
    )
    assert not engine.scheduler.block_manager.caches_prefixes
    params = SamplingParams(max_tokens=NUM_TOKENS, beam_width=4, early_stopping=0)
    outs = engine.generate(prompts, params)
    for ids, out in zip(prompts, outs, strict=True):
        expected = hf_beams(hf_model, ids, 4, 1.0, False, engine.eos_token_ids)
        assert [list(b.token_ids) for b in out.beams] == expected
    blocks = engine.scheduler.block_manager
    assert blocks.num_free_blocks == blocks.num_total_blocks and not blocks._extra_holders
