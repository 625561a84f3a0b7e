import dataclasses

import pytest

from pipeline.errors import ConfigError
from pipeline.specs.tune import AnnealOptions, ServingSearch, TuneSpec
from pipeline.tune.spec_checks import check_tune_spec


def test_every_bad_tune_value_is_named_at_once():
    spec = TuneSpec(
        space="everything",
        anneal=AnnealOptions(
            max_trials=0, repeats=1, cooling=1.5, min_temperature=1.0, confidence=1.0
        ),
        serving=ServingSearch(ttft_p99_ms=0, max_batch_size=(0, 4)),
    )
    with pytest.raises(ConfigError) as err:
        check_tune_spec(spec)
    message = str(err.value)
    for fragment in (
        "tune.space='everything'",
        "tune.anneal.max_trials=0",
        "tune.anneal.repeats=1 (must be >= 2",
        "tune.anneal.cooling=1.5",
        "tune.anneal.min_temperature=1.0",
        "tune.anneal.confidence=1.0",
        "tune.serving.ttft_p99_ms=0",
        "tune.serving.max_batch_size=[0, 4] (each >= 1)",
    ):
        assert fragment in message, fragment


def test_the_shipped_defaults_pass():
    check_tune_spec(TuneSpec())
    check_tune_spec(dataclasses.replace(TuneSpec(), space="kernels"))
