"""Every option file of every config group composes and converts to specs; bad keys are refused."""

from pathlib import Path

import pytest

from pipeline.errors import ConfigError
from tests.conftest import CONF_DIR, make_spec

GROUPS = [p for p in Path(CONF_DIR).iterdir() if p.is_dir() and p.name != "local"]
NEEDS_SOURCE = {("model", "hf-local"), ("model", "hub")}


@pytest.mark.parametrize(
    "group,option", sorted((g.name, f.stem) for g in GROUPS for f in g.glob("*.yaml"))
)
def test_every_option_composes(group, option, tmp_path):
    extra = ["model.source=org/name"] if (group, option) in NEEDS_SOURCE else []
    spec = make_spec("convert", f"{group}={option}", *extra, workdir=tmp_path)
    assert spec.stage == "convert"


def test_unknown_key_and_wrong_type_are_all_reported(tmp_path):
    with pytest.raises(ConfigError) as err:
        make_spec("convert", "+model.colour=red", "build.max_batch_size=lots", workdir=tmp_path)
    assert "model.colour: unknown key" in str(err.value)
    assert "build.max_batch_size: expected int, got 'lots'" in str(err.value)


def test_overrides_reach_the_specs(tmp_path):
    spec = make_spec("convert", "parallel.tp_size=3", "model.dtype=bfloat16", workdir=tmp_path)
    assert spec.parallel.tp_size == 3 and spec.parallel.world_size == 3
    assert spec.model.dtype == "bfloat16"
