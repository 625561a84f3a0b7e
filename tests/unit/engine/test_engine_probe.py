"""The probe's comparison: exact on the recorded device and dtype, within the dtype's tolerance
elsewhere, a near tie allowed to go either way, non-finite logits never."""

import pytest

from pipeline.engine.core.engine_probe import EXACT_TOLERANCE, TOLERANCE, mismatch

RECORDED = {
    "token_ids": [10, 20],
    "top2_logits": [[17.0, 14.0], [25.0, 24.99]],  # step 1 is a near tie
    "spread": [3.0, 3.0],
    "is_finite": True,
    "are_weights_finite": True,
    "device": "cpu",
    "device_name": "cpu",
    "dtype": "float32",
}


def probe(top: float, tokens=(10, 20), device="cpu", dtype="float32", is_finite=True) -> dict:
    return RECORDED | {
        "token_ids": list(tokens),
        "top2_logits": [[top, 14.0], [25.0, 24.0]],
        "is_finite": is_finite,
        "device": device,
        "device_name": "NVIDIA H100 80GB HBM3" if device == "cuda" else device,
        "dtype": dtype,
    }


def test_the_recorded_device_and_dtype_compare_exactly():
    assert mismatch(RECORDED, probe(17.0)) is None
    nudge = 2 * EXACT_TOLERANCE * 3.0
    assert "greedy step 0: top logit 17.01" in mismatch(RECORDED, probe(17.0 + nudge))
    assert "greedy step 0: token 11, recorded 10" in mismatch(RECORDED, probe(17.0, (11, 20)))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_another_device_or_dtype_gets_the_dtypes_tolerance(dtype):
    allowed = TOLERANCE[dtype] * 3.0
    assert mismatch(RECORDED, probe(17.0 + 0.9 * allowed, device="cuda", dtype=dtype)) is None
    assert mismatch(RECORDED, probe(17.0 + 1.1 * allowed, device="cuda", dtype=dtype))


def test_a_near_tie_may_pick_the_other_token_but_a_clear_winner_may_not():
    bf16 = {"device": "cuda", "dtype": "bfloat16"}
    assert mismatch(RECORDED, probe(17.0, (10, 21), **bf16)) is None
    assert "token 11" in mismatch(RECORDED, probe(17.0, (11, 20), **bf16))


def test_non_finite_logits_always_fail_and_weights_when_the_build_had_none():
    assert mismatch(RECORDED, probe(17.0, is_finite=False)) == "its logits are not finite"
    nan_weight = probe(17.0) | {"are_weights_finite": False}
    assert "a weight is NaN or infinite" in mismatch(RECORDED, nan_weight)
    assert mismatch(RECORDED | {"are_weights_finite": False}, nan_weight) is None
