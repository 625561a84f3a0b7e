"""GenerateRequest -> the ensemble's inputs (only what is set), as JSON values and as tensors."""

import numpy as np

from pipeline.client import GenerateRequest


def test_unset_knobs_are_not_sent():
    assert GenerateRequest("hi", max_tokens=8).values(stream=True) == {
        "text_input": "hi",
        "max_tokens": 8,
        "stream": True,
    }


def test_tensors_are_batch_one_with_the_ensemble_dtypes():
    arrays = GenerateRequest(
        "hi", max_tokens=8, temperature=0.5, top_k=4, seed=7, stop_words=("\n", "User:"), end_id=-1
    ).arrays(stream=False)
    assert arrays["text_input"].dtype == np.object_ and arrays["text_input"].tolist() == [[b"hi"]]
    assert arrays["stop_words"].tolist() == [[b"\n", b"User:"]]
    expected = {
        "max_tokens": np.int32,
        "stream": np.bool_,
        "temperature": np.float32,
        "top_k": np.int32,
        "seed": np.uint64,
        "end_id": np.int32,
    }
    for name, dtype in expected.items():
        assert arrays[name].dtype == dtype and arrays[name].shape == (1, 1), name
    assert "top_p" not in arrays and "bad_words" not in arrays
