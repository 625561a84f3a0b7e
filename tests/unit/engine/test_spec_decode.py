"""Speculative decoding's host side without a model: draft lookup, the verify step's record and
packing, acceptance and rollback, the adaptive draft count and the settings' checks."""

import dataclasses

import numpy as np
import pytest

from pipeline.engine.execution.step_inputs import micro_batch, pack_step, with_verify_rows
from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.sampled_tokens import SampledTokens
from pipeline.engine.scheduling.scheduler import Scheduler
from pipeline.engine.scheduling.spec_tokens import accepted_tokens, rows_of
from pipeline.engine.spec.acceptance import Acceptance
from pipeline.engine.spec.prompt_lookup import PromptLookupProposer, lookup_drafts
from pipeline.engine.spec.speculator import Speculator
from pipeline.engine.spec_config import SpecConfig, spec_config
from pipeline.errors import ConfigError
from pipeline.specs.deploy import SpecDecodeOptions
from tests.unit.engine.fake_sequences import make_seq, step

BLOCK_SIZE = 4


def test_lookup_takes_the_longest_ngram_and_its_latest_match():
    tokens = np.array([1, 2, 3, 9, 9, 2, 3, 4, 5, 6, 1, 2, 3])
    # the 3-gram (1, 2, 3) occurred at 0 only: what followed it there
    assert lookup_drafts(tokens, 3, 3, 1) == [9, 9, 2]
    # 2-grams only: (2, 3) occurred at 1 and 5; the latest, 5, was followed by 4, 5
    assert lookup_drafts(tokens, 2, 2, 1) == [4, 5]
    assert lookup_drafts(np.array([4, 5, 6]), 3, 3, 1) == []  # nothing earlier
    assert lookup_drafts(np.array([7, 8, 7]), 5, 3, 1) == [8, 7]  # as many as there are
    # a repeating tail: the latest match is followed by one token, the earliest by more
    assert lookup_drafts(np.array([4, 5, 5, 5, 5, 5, 5]), 3, 2, 1) == [5, 5, 5]


def windowed_lookup(tokens: list[int], num_drafts: int, max_ngram: int, min_ngram: int):
    """The definition, window by window: the longest n whose suffix occurred earlier; of its
    earlier windows, the latest with num_drafts tokens after it, else the earliest."""
    length = len(tokens)
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        starts = [s for s in range(length - n) if tokens[s : s + n] == tokens[length - n :]]
        if starts:
            full = [s for s in starts if s + n + num_drafts <= length]
            start = (full[-1] if full else starts[0]) + n
            return tokens[start : start + num_drafts]
    return []


def test_lookup_equals_its_window_by_window_definition():
    rng = np.random.default_rng(0)
    for _ in range(3000):
        tokens = rng.integers(0, int(rng.integers(1, 6)), int(rng.integers(1, 40))).tolist()
        k, max_ngram = int(rng.integers(1, 9)), int(rng.integers(1, 5))
        min_ngram = int(rng.integers(1, max_ngram + 1))
        want = windowed_lookup(tokens, k, max_ngram, min_ngram)
        assert lookup_drafts(np.array(tokens), k, max_ngram, min_ngram) == want


def test_accepted_tokens_are_the_agreeing_prefix_and_the_targets_next():
    assert accepted_tokens((4, 5, 6), [4, 5, 6, 7]) == ([4, 5, 6, 7], 3)
    assert accepted_tokens((4, 5, 6), [4, 8, 6, 7]) == ([4, 8], 1)
    assert accepted_tokens((4,), [3, 2]) == ([3], 0)
    assert accepted_tokens((), [3]) == ([3], 0)
    assert rows_of([(1, 2), (), (3,)], [10, 11, 12, 20, 30, 31]) == [[10, 11, 12], [20], [30, 31]]


def decoding() -> Scheduler:
    """a (5-token prompt) and b (3-token prompt) each decoded one token (5), nothing pending."""
    s = Scheduler(BlockManager(64, BLOCK_SIZE), 8, 64, "max_utilization", True)
    s.add(make_seq("a", 5, max_tokens=8))
    s.add(make_seq("b", 3, max_tokens=8))
    step(s)
    return s


def test_a_drafted_row_feeds_its_newest_token_and_drafts():
    s = decoding()
    s.max_num_tokens = 7
    a, b = s.running
    a.draft_token_ids = [11, 12, 13]
    s.add(make_seq("c", 6))  # its first 2 prompt tokens fill the budget: they sample nothing
    batch = s.schedule()
    assert batch.num_tokens.tolist() == [4, 1, 2]
    assert batch.input_ids.tolist() == [5, 11, 12, 13, 5, 7, 7]
    assert batch.draft_token_ids == ((11, 12, 13), (), ())
    assert batch.samples.tolist() == [True, True, False]
    assert a.num_blocks * BLOCK_SIZE >= 5 + 4  # blocks for the k + 1 slots
    packed = with_verify_rows(pack_step(batch, 1, BLOCK_SIZE, 999, None), batch)
    # every position of a's row has logits, b's last, c's none; each names its sequence
    assert packed.parts.logits_rows.tolist() == [0, 1, 2, 3, 4]
    assert packed.header.num_sampled == 5 and not packed.header.samples_all
    assert [seq.request_id for seq in packed.seqs] == ["a"] * 4 + ["b"]
    assert micro_batch(batch, slice(0, 1)).draft_token_ids == ((11, 12, 13),)


def test_a_verify_step_keeps_the_agreeing_drafts_and_rolls_back_the_rest():
    s = decoding()
    a, b = s.running
    a.draft_token_ids = [11, 12, 13]
    batch = s.schedule()
    sampled = SampledTokens([a, b], None, None, 1, drafts=list(batch.draft_token_ids))
    s.update_from_launch(batch, sampled)
    assert a.num_computed_tokens == 9
    # a: the target agrees with 11 and 12, then says 7 (13 rejected); b decodes 6
    s.update_from_output(sampled, [11, 12, 7, 0, 6])
    assert a.token_ids[5:] == [5, 11, 12, 7] and b.token_ids[3:] == [5, 6]
    assert a.num_computed_tokens == len(a.token_ids) - 1  # 13's slot is written again later
    assert a.num_pending_tokens == b.num_pending_tokens == 0
    a.draft_token_ids = []
    assert s.schedule().num_tokens.tolist() == [1, 1]


def test_the_token_budget_trims_drafts():
    s = Scheduler(BlockManager(64, BLOCK_SIZE), 8, 3, "max_utilization", True)
    s.add(make_seq("a", 2, max_tokens=8))
    step(s)
    s.running[0].draft_token_ids = [1, 2, 3, 4]
    batch = s.schedule()
    assert batch.num_tokens.tolist() == [3] and batch.draft_token_ids == ((1, 2),)


def test_adaptive_drafts_shrink_with_rejections_and_probe_when_none():
    acceptance = Acceptance()
    assert acceptance.num_drafts(4, 0.1, 3) == 4  # optimistic at first
    for _ in range(10):
        acceptance.observe(4, 0)
    assert acceptance.rate < 0.1
    assert [acceptance.num_drafts(4, 0.1, 3) for _ in range(6)] == [0, 0, 1, 0, 0, 1]
    for _ in range(10):
        acceptance.observe(4, 4)
    assert acceptance.num_drafts(4, 0.1, 3) == 4
    half = Acceptance()
    for _ in range(20):
        half.observe(4, 1)  # one of four kept: rate ~0.5
    assert half.num_drafts(8, 0.1, 3) == 3  # 0.5 ** 3 >= 0.1 > 0.5 ** 4


def test_bad_settings_name_every_field():
    assert not spec_config(None, "engine x").enabled
    assert spec_config({"method": "prompt_lookup"}, "engine x").num_draft_tokens == 4
    with pytest.raises(ConfigError, match="method='medusa'.*num_draft_tokens=0.*min_ngram=3"):
        spec_config(
            {"method": "medusa", "num_draft_tokens": 0, "min_ngram": 3, "max_ngram": 2}, "x"
        )
    with pytest.raises(ConfigError, match="needs draft_engine_dir"):
        spec_config({"method": "draft_model"}, "x")
    with pytest.raises(ConfigError, match="unknown keys \\['k'\\]"):
        spec_config({"k": 3}, "x")


def test_the_deploy_options_are_the_engines_settings():
    options = dataclasses.asdict(SpecDecodeOptions(method="draft_model", draft_engine_dir="/d"))
    assert spec_config(options, "x") == SpecConfig(method="draft_model", draft_engine_dir="/d")


def test_no_drafts_above_the_batch_limit_and_a_miss_counts_as_a_rejection():
    s = decoding()
    a, b = s.running
    a.token_ids += [9, 7, 7, 5]  # a's tail (7, 5) occurred before: drafts 9, 7, ...
    a.num_computed_tokens = a.num_tokens - 1
    spec = SpecConfig(method="prompt_lookup", num_draft_tokens=2, max_batch_size=1)
    assert Speculator(spec, PromptLookupProposer(3, 1)).plan(s.running) == []  # 2 decoding
    speculator = Speculator(dataclasses.replace(spec, max_batch_size=2), PromptLookupProposer(2, 2))
    planned = speculator.plan(s.running)
    assert planned == [(a, 2), (b, 2)]
    speculator.propose(planned)
    assert a.draft_token_ids == [9, 7] and b.draft_token_ids == []  # b's (7, 5) is new
    assert speculator._acceptance[b].rate < 1
    speculator.plan(s.running)  # the next schedule's drafts replace these
    assert a.draft_token_ids == []


def test_requests_waiting_to_be_admitted_count_against_the_batch_limit():
    s = decoding()
    a, _ = s.running
    a.token_ids += [9, 7, 7, 5]
    a.num_computed_tokens = a.num_tokens - 1
    spec = SpecConfig(method="prompt_lookup", num_draft_tokens=2, max_batch_size=3)
    speculator = Speculator(spec, PromptLookupProposer(2, 2))
    assert speculator.plan(s.running, num_waiting=2) == []  # 2 running + 2 waiting > 3
    assert [seq for seq, _ in speculator.plan(s.running, num_waiting=1)] == s.running
    s.add(make_seq("c", 6))
    s.schedule()  # c's prompt runs: it counts, though it does not decode yet
    assert len(s.running) == 3 and speculator.plan(s.running, num_waiting=1) == []
