"""The bitmask path of guided decoding without a model: a byte-level tokenizer's grammar, the
runner's bitmask over a batch mixing guided and free rows, a pending token taken from the last
launch's host copy before the next bitmask, the sampler's masking, and the compiler's LRU."""

import pytest
import torch
from transformers import AutoTokenizer

from pipeline.engine.execution.grammar_bitmask import GrammarBitmask
from pipeline.engine.guided.grammar_compiler import GrammarCompiler, tokenizer_info
from pipeline.engine.guided.grammar_state import GrammarState
from pipeline.engine.layers.sampler import Sampler, SamplingTensors
from pipeline.engine.scheduling.sequence import Sequence
from pipeline.request.guided import GuidedDecoding
from pipeline.request.sampling_params import SamplingParams
from scripts.byte_tokenizer import write_byte_tokenizer

VOCAB = 300  # logits wider than the tokenizer's 300 tokens: padded to 320
WIDTH = 320


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return AutoTokenizer.from_pretrained(write_byte_tokenizer(VOCAB, tmp_path_factory.mktemp("t")))


@pytest.fixture(scope="module")
def compiler(tokenizer) -> GrammarCompiler:
    return GrammarCompiler(tokenizer_info(tokenizer, WIDTH, (tokenizer.eos_token_id,)))


def byte_id(tokenizer, char: str) -> int:
    (token,) = tokenizer.encode(char)
    return token


def seq(compiler, guide: GuidedDecoding | None, eos: int) -> Sequence:
    s = Sequence("r", [1, 2], SamplingParams(max_tokens=8, guide=guide), (eos,))
    if guide is not None:
        s.grammar = GrammarState(compiler.compile(guide), s.end_ids)
    return s


def allowed(bitmask: torch.Tensor, row: int) -> set[int]:
    bits = (bitmask[row, :, None] >> torch.arange(32)) & 1
    return set(torch.nonzero(bits.reshape(-1))[:, 0].tolist())


def test_guided_rows_are_masked_free_rows_are_not(tokenizer, compiler):
    a, b, c = (byte_id(tokenizer, ch) for ch in "abc")
    eos = tokenizer.eos_token_id
    seqs = [seq(compiler, None, eos), seq(compiler, GuidedDecoding("regex", "a(b|c)"), eos)]
    bitmask, rows = GrammarBitmask(WIDTH, 4, torch.device("cpu")).fill(seqs, None)
    assert rows.tolist() == [1] and bitmask.shape == (2, WIDTH // 32)
    assert allowed(bitmask, 1) == {a}  # no filler word is spelled "a" + b or c
    # the sampler masks the guided row only, padding columns past the vocabulary included
    logits = torch.zeros(2, WIDTH)
    logits[:, b] = logits[:, WIDTH - 1] = 5.0
    tensors = SamplingTensors([True, True], [None, None], [[], []], token_bitmask=(bitmask, rows))
    assert Sampler(torch.Generator())(logits, tensors).tolist() == [b, a]


def test_a_pending_token_is_taken_before_the_next_bitmask_and_only_once(tokenizer, compiler):
    a, b, c = (byte_id(tokenizer, ch) for ch in "abc")
    eos = tokenizer.eos_token_id
    guided = seq(compiler, GuidedDecoding("regex", "a(b|c)"), eos)
    guided.num_pending_tokens, guided.pending_row = 1, 2  # row 2 of the last launch
    last = torch.tensor([7, 8, a])
    masks = GrammarBitmask(WIDTH, 4, torch.device("cpu"))
    bitmask, _ = masks.fill([guided], (last, None))
    assert allowed(bitmask, 0) == {b, c}
    # a launch that failed after its fill: the token is not taken twice
    bitmask, _ = masks.fill([guided], (last, None))
    assert allowed(bitmask, 0) == {b, c}
    guided.num_pending_tokens = 0
    assert guided.append_tokens([a, c]) == (2, None)  # the scheduler's append agrees
    bitmask, _ = masks.fill([guided], None)
    assert allowed(bitmask, 0) == {eos}  # complete: only the end token
    assert guided.append_tokens([eos]) == (1, "stop")


def test_a_token_outside_the_grammar_fails_its_request(tokenizer, compiler):
    guided = seq(compiler, GuidedDecoding("regex", "a"), tokenizer.eos_token_id)
    with pytest.raises(ValueError, match="outside the request's grammar"):
        guided.append_tokens([byte_id(tokenizer, "z")])


def test_compiled_grammars_are_an_lru_by_text(tokenizer):
    compiler = GrammarCompiler(tokenizer_info(tokenizer, WIDTH, ()), max_cached=2)
    guides = [GuidedDecoding("regex", r) for r in ("a", "b", "c")]
    first = compiler.compile(guides[0])
    assert compiler.compile(GuidedDecoding("regex", "a")) is first and compiler.num_compiled == 1
    compiler.compile(guides[1])
    compiler.compile(guides[2])  # evicts "a", the least recently used
    compiler.compile(guides[0])
    assert compiler.num_compiled == 4
    with pytest.raises(ValueError, match=r"request: guided_decoding_guide \(regex\)"):
        compiler.compile(GuidedDecoding("regex", "(unclosed"))


def test_a_launchs_steps_advance_the_matcher_and_a_failed_launch_gives_them_back(
    tokenizer, compiler
):
    a, b, c = (byte_id(tokenizer, ch) for ch in "abc")
    eos = tokenizer.eos_token_id
    guided = seq(compiler, GuidedDecoding("regex", "a(b|c)"), eos)
    masks = GrammarBitmask(WIDTH, 4, torch.device("cpu"))
    masks.start_launch()
    assert allowed(masks.fill([guided], None)[0], 0) == {a}  # step 0
    step0 = torch.tensor([a]), None  # the runner's host copy of step 0's tokens
    assert allowed(masks.fill([guided], None, step0)[0], 0) == {b, c}  # step 1: after "a"
    step1 = torch.tensor([b]), None
    assert allowed(masks.fill([guided], None, step1)[0], 0) == {eos}
    masks.discard_launch()  # the launch failed: neither token was appended
    assert guided.grammar.num_ahead == 0
    assert allowed(masks.fill([guided], None)[0], 0) == {a}


def test_a_batch_fill_writes_each_guided_row_as_its_own_matcher_would(tokenizer, compiler):
    a, b = (byte_id(tokenizer, ch) for ch in "ab")
    eos = tokenizer.eos_token_id
    guides = [GuidedDecoding("regex", "a(b|c)"), GuidedDecoding("regex", "(a|b)+c")]
    seqs = [seq(compiler, guides[i % 2], eos) for i in range(20)]
    for s in seqs[::3]:  # rows in different states
        s.grammar.accept(a)
    seqs.insert(5, seq(compiler, None, eos))  # a free row between them stays unwritten
    bitmask, rows = GrammarBitmask(WIDTH, 32, torch.device("cpu")).fill(seqs, None)
    assert rows.tolist() == [row for row, s in enumerate(seqs) if s.grammar is not None]
    one = torch.zeros((1, bitmask.shape[1]), dtype=torch.int32)
    for row in rows.tolist():
        seqs[row].grammar.matcher.fill_next_token_bitmask(one, 0)
        assert torch.equal(bitmask[row], one[0]), row
    c = byte_id(tokenizer, "c")
    assert allowed(bitmask, 0) == {b, c}  # "a(b|c)" after "a"
    assert allowed(bitmask, 1) == {a, b}  # "(a|b)+c" fresh


def test_a_grammar_that_ends_inside_a_launch_keeps_its_last_token(tokenizer, compiler):
    # ignore_eos: the grammar ends where it is complete, on a token taken ahead in the launch
    a, b = (byte_id(tokenizer, ch) for ch in "ab")
    params = SamplingParams(max_tokens=8, ignore_eos=True, guide=GuidedDecoding("regex", "ab"))
    guided = Sequence("r", [1, 2], params, (tokenizer.eos_token_id,))
    guided.grammar = GrammarState(compiler.compile(params.guide), guided.end_ids)
    masks = GrammarBitmask(WIDTH, 4, torch.device("cpu"))
    masks.start_launch()
    assert allowed(masks.fill([guided], None)[0], 0) == {a}
    assert allowed(masks.fill([guided], None, (torch.tensor([a]), None))[0], 0) == {b}
    assert masks.fill([guided], None, (torch.tensor([b]), None)) is None  # ended: unmasked
    assert masks.fill([guided], None, (torch.tensor([7]), None)) is None  # (not taken)
    assert guided.append_tokens([a, b, 7, 8]) == (2, "stop")
    assert guided.token_ids[2:] == [a, b]


def test_a_launchs_tokens_taken_ahead_are_appended_at_once_as_token_by_token(tokenizer, compiler):
    a, b, c = (byte_id(tokenizer, ch) for ch in "abc")
    eos = tokenizer.eos_token_id
    guide = GuidedDecoding("regex", "(a|b)+c")
    ahead, direct = seq(compiler, guide, eos), seq(compiler, guide, eos)
    masks = GrammarBitmask(WIDTH, 4, torch.device("cpu"))
    masks.start_launch()
    for token in (a, b, a):
        masks.fill([ahead], None, (torch.tensor([token]), None))
    assert ahead.grammar.num_ahead == 3
    assert ahead.append_tokens([a, b, a]) == direct.append_tokens([a, b, a]) == (3, None)
    assert ahead.token_ids == direct.token_ids and ahead.grammar.num_ahead == 0
    masks.fill([ahead], None, (torch.tensor([c]), None))  # ends the grammar: token by token
    assert ahead.append_tokens([c, eos]) == direct.append_tokens([c, eos]) == (2, "stop")
    assert ahead.token_ids == direct.token_ids
    with pytest.raises(ValueError, match="outside the request's grammar"):  # a token not taken
        seq(compiler, guide, eos).append_tokens([c, a])


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_the_grammars_end_flag_follows_its_matcher_token_by_token(tokenizer, compiler, ignore_eos):
    a, c = (byte_id(tokenizer, ch) for ch in "ac")
    eos = tokenizer.eos_token_id
    params = SamplingParams(
        max_tokens=8, ignore_eos=ignore_eos, guide=GuidedDecoding("regex", "a+c")
    )
    guided = Sequence("r", [1, 2], params, (eos,))
    guided.grammar = GrammarState(compiler.compile(params.guide), guided.end_ids)
    masks = GrammarBitmask(WIDTH, 4, torch.device("cpu"))
    masks.start_launch()
    ended = []
    for token in (a, a, c) if ignore_eos else (a, c, eos):
        masks.fill([guided], None, (torch.tensor([token]), None))
        assert guided.grammar.is_terminated_ahead == guided.grammar.matcher.is_terminated()
        ended.append(guided.grammar.is_terminated_ahead)
    assert ended == [False, False, True]
    masks.discard_launch()  # the launch failed: its tokens given back, the grammar runs again
    assert not guided.grammar.is_terminated_ahead and not guided.grammar.matcher.is_terminated()
