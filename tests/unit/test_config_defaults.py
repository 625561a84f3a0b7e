"""One source per default: the spec dataclasses. Every option file under conf/ holds only what its
preset changes, and a composed group is exactly its spec's defaults with that preset on top."""

import typing
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from pipeline.config import SPEC_DEFAULTS, spec_defaults
from pipeline.specs.pipeline import PipelineSpec
from tests.conftest import CONF_DIR

CONF = Path(CONF_DIR)
GROUP_SPECS = typing.get_type_hints(PipelineSpec)
GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name != "local")
OPTIONS = sorted((g, p.relative_to(CONF / g).with_suffix("").as_posix())
                 for g in GROUPS for p in (CONF / g).rglob("*.yaml"))  # fmt: skip


def _body(group: str, option: str) -> tuple[list[str], dict]:
    node = yaml.safe_load((CONF / group / f"{option}.yaml").read_text()) or {}
    parents = [e.split("@")[0] for e in node.pop("defaults", []) if e != "_self_"]
    return parents, node


def _merged(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        both_maps = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merged(out[key], value) if both_maps else value
    return out


def inherited(group: str, option: str) -> dict:
    """What `option` starts from: its spec's defaults, then the presets its defaults list names."""
    node = spec_defaults(GROUP_SPECS[group])
    for parent in _body(group, option)[0]:
        node = _merged(node, composed_file(group, parent))
    return node


def composed_file(group: str, option: str) -> dict:
    return _merged(inherited(group, option), _body(group, option)[1])


def restated(base: dict, node: dict, path: str = "") -> list[str]:
    """Keys of `node` whose value equals the one in `base` (what the file would get anyway)."""
    out = []
    for key, value in node.items():
        here = f"{path}{key}"
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            out += restated(base[key], value, here + ".")
        elif key in base and base[key] == value:
            out.append(f"{here}={value!r}")
    return out


@pytest.mark.parametrize("group,option", OPTIONS)
def test_an_option_file_sets_only_what_its_preset_changes(group, option):
    stem = option.rsplit("/", 1)[-1]
    repeats = [
        key
        for key in restated(inherited(group, option), _body(group, option)[1])
        if not key.endswith(f"={stem!r}")  # the option naming itself (name: smoke) is no default
    ]
    assert repeats == [], (
        f"conf/{group}/{option}.yaml restates defaults of {GROUP_SPECS[group].__name__} "
        f"(pipeline/specs/): {repeats}; delete them there, or change the dataclass default"
    )


def test_the_entry_config_sets_no_top_level_default():
    node = yaml.safe_load((CONF / "config.yaml").read_text())
    assert node["defaults"][0] == SPEC_DEFAULTS
    assert sorted(node) == ["defaults", "hydra"], "top-level defaults belong in PipelineSpec"


@pytest.mark.parametrize("group,option", [(g, o) for g, o in OPTIONS if "/" not in o])
def test_a_composed_group_is_its_spec_defaults_with_the_preset_on_top(group, option, tmp_path):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["stage=convert", f"{group}={option}"])
    assert OmegaConf.to_container(cfg[group], resolve=False) == composed_file(group, option)


def test_spec_defaults_follow_the_dataclasses():
    node = spec_defaults()
    assert node["stage"] == "???" and node["model"]["source"] == "???"  # a preset sets them
    assert node["workdir"] == PipelineSpec.__dataclass_fields__["workdir"].default
    assert node["build"]["trtllm"]["timing_cache_dir"] == "${workdir}/trtllm-timing-cache"
    assert node["bench"]["sweep"]["sizes"] == [1, 2, 4, 8]  # tuples as lists


def test_workdir_reaches_the_defaults_that_live_under_it(tmp_path):
    from tests.conftest import make_spec

    spec = make_spec("convert", workdir=tmp_path)
    assert spec.build.trtllm.timing_cache_dir == f"{tmp_path}/trtllm-timing-cache"
    assert spec.tune.kernels.cache_path == f"{tmp_path}/kernel-tuning-cache.json"
