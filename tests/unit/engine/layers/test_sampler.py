import pytest
import torch

from pipeline.engine.layers.sampler import Sampler, SamplingTensors, filtered_probs


def tensors(
    n: int, vocab: int, temperature=1.0, top_k=0, top_p=1.0, greedy=False, seeds=None, banned=None
) -> SamplingTensors:
    generators = []
    for seed in seeds or [None] * n:
        generators.append(None if seed is None else torch.Generator().manual_seed(seed))
    return SamplingTensors(
        temperatures=torch.full((n,), temperature),
        top_ks=torch.full((n,), top_k or vocab),
        top_ps=torch.full((n,), top_p),
        is_greedy=[greedy] * n,
        generators=generators,
        banned_token_ids=banned or [[] for _ in range(n)],
    )


def sampler() -> Sampler:
    return Sampler(torch.Generator().manual_seed(0))


def test_greedy_is_argmax_and_respects_banned_tokens():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(1))
    top = logits.argmax(-1)
    assert torch.equal(sampler()(logits, tensors(3, 50, greedy=True)), top)
    banned = [[top[0].item()], [], []]
    picked = sampler()(logits, tensors(3, 50, greedy=True, banned=banned))
    assert picked[0] != top[0] and torch.equal(picked[1:], top[1:])


def test_top_k_one_equals_greedy():
    logits = torch.randn(8, 100, generator=torch.Generator().manual_seed(2))
    picked = sampler()(logits, tensors(8, 100, temperature=1.5, top_k=1))
    assert torch.equal(picked, logits.argmax(-1))


def test_seeded_rows_repeat_and_differ_from_other_seeds():
    logits = torch.zeros(1, 1000)  # uniform: any token is equally likely
    draws = [sampler()(logits, tensors(1, 1000, seeds=[seed])).item() for seed in (7, 7, 8, 9)]
    assert draws[0] == draws[1]
    assert len(set(draws)) >= 2


def test_seeded_draw_does_not_depend_on_the_rest_of_the_batch():
    logits = torch.zeros(3, 1000)
    alone = sampler()(logits[:1], tensors(1, 1000, seeds=[11])).item()
    batched = sampler()(logits, tensors(3, 1000, seeds=[11, None, 5]))
    assert batched[0].item() == alone


def test_top_k_and_top_p_restrict_the_support():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]])
    probs, order = filtered_probs(logits, torch.ones(1), torch.tensor([2]), torch.ones(1))
    assert (probs > 0).sum() == 2 and order[0, :2].tolist() == [0, 1]
    # top_p: the smallest prefix whose mass reaches 0.5 is the top token (p ~ 0.64)
    probs, _ = filtered_probs(logits, torch.ones(1), torch.tensor([5]), torch.tensor([0.5]))
    assert (probs > 0).sum() == 1
    picks = {sampler()(logits, tensors(1, 5, top_p=0.5, seeds=[s])).item() for s in range(20)}
    assert picks == {0}


def test_temperature_sampling_covers_more_than_one_token():
    logits = torch.tensor([[1.0, 1.0, 1.0, -50.0]])
    picks = {sampler()(logits, tensors(1, 4, seeds=[s])).item() for s in range(30)}
    assert picks == {0, 1, 2}


def test_logit_bias_forces_and_bans_tokens_in_its_rows_only():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(3))
    top = logits.argmax(-1)
    forced = (top[0].item() + 1) % 50
    params = tensors(3, 50, greedy=True)
    # row 0: +100 on another token; row 1: -100 on its argmax; row 2: no bias
    params.logit_bias = (
        torch.tensor([0, 1]),
        torch.tensor([forced, top[1].item()]),
        torch.tensor([100.0, -100.0]),
    )
    picked = sampler()(logits, params)
    assert picked[0].item() == forced
    assert picked[1] != top[1] and picked[1] == logits[1].topk(2).indices[1]
    assert picked[2] == top[2]


def test_min_p_zero_is_off_and_min_p_drops_the_unlikely():
    logits = torch.tensor([[2.0, 1.9, 0.0, -1.0]])
    off, _ = filtered_probs(logits, torch.ones(1), torch.tensor([4]), torch.ones(1))
    zero, _ = filtered_probs(
        logits, torch.ones(1), torch.tensor([4]), torch.ones(1), torch.zeros(1)
    )
    assert torch.equal(off, zero) and (zero > 0).sum() == 4
    # p(0) / p(top) = e^-2 ~ 0.135: min_p 0.5 keeps the two near the top only
    half, order = filtered_probs(
        logits, torch.ones(1), torch.tensor([4]), torch.ones(1), torch.tensor([0.5])
    )
    assert (half > 0).sum() == 2 and order[0, :2].tolist() == [0, 1]
    params = tensors(1, 4, seeds=[0])
    params.min_ps = torch.tensor([0.5])
    picks = set()
    for seed in range(30):
        params.generators = [torch.Generator().manual_seed(seed)]
        picks.add(sampler()(logits, params).item())
    assert picks == {0, 1}


def test_a_mixed_batch_builds_bias_and_min_p_tensors_once():
    from pipeline.engine.execution.request_logits import sampling_tensors
    from pipeline.engine.scheduling.sequence import Sequence
    from pipeline.request.sampling_params import SamplingParams

    params = [
        SamplingParams(logit_bias=((9, -100.0), (4, 2.5))),
        SamplingParams(temperature=0.7, min_p=0.2),
        SamplingParams(),
    ]
    seqs = [Sequence(str(i), [1, 2], p, eos_token_ids=(0,)) for i, p in enumerate(params)]
    built = sampling_tensors(seqs, torch.device("cpu"), vocab_size=16)
    rows, tokens, biases = built.logit_bias
    assert rows.tolist() == [0, 0] and tokens.tolist() == [4, 9]  # sorted by token id
    assert biases.tolist() == [2.5, -100.0]
    assert built.min_ps.tolist() == pytest.approx([0.0, 0.2, 0.0])
    plain = sampling_tensors(seqs[2:], torch.device("cpu"), vocab_size=16)
    assert plain.logit_bias is None and plain.min_ps is None


@pytest.mark.parametrize(
    ("knobs", "named"),
    [
        ({"min_p": 1.5}, "min_p=1.5 must be in [0.0, 1.0]"),
        ({"min_p": float("nan")}, "min_p=nan"),
        ({"logit_bias": ((3, 100.5),)}, "logit_bias=100.5 (token 3) must be in [-100.0, 100.0]"),
        ({"logit_bias": ((3, 1.0), (3, 2.0))}, "a token id is given twice"),
    ],
)
def test_sampling_params_check_min_p_and_logit_bias(knobs, named):
    from pipeline.request.sampling_params import SamplingParams

    with pytest.raises(ValueError) as info:
        SamplingParams(**knobs)
    assert named in str(info.value)
