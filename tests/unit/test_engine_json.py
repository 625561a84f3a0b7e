"""An engine dir's config.json has one reader, pipeline.engine_json, for both backends' layouts;
every other module takes its facts from it."""

import ast
import json
from pathlib import Path

import pytest

from pipeline.engine_json import EngineJson
from pipeline.errors import ArtifactError
from tests.conftest import REPO

TRTLLM_ENGINE = REPO / "tests" / "fixtures" / "trtllm_engine"
SECTIONS = ("pretrained_config", "build_config")
READER = REPO / "pipeline" / "engine_json.py"


def test_reads_an_engine_as_trtllm_build_writes_it():
    engine = EngineJson.read(TRTLLM_ENGINE)
    raw = json.loads((TRTLLM_ENGINE / "config.json").read_text())
    assert engine.version == raw["version"] and engine.backend == ""
    assert engine.build["max_batch_size"] == raw["build_config"]["max_batch_size"]
    assert (engine.tp_size, engine.pp_size, engine.world_size) == (1, 1, 1)
    assert engine.is_paged_kv_cache  # kv_cache_type "PAGED"
    assert engine.is_plugin_enabled("gpt_attention_plugin")
    assert engine.engine_dir == TRTLLM_ENGINE


def test_mapping_and_plugin_flags(tmp_path):
    config = {
        "backend": "torch",
        "pretrained_config": {"mapping": {"tp_size": 2, "pp_size": 3}},
        "build_config": {"plugin_config": {"paged_kv_cache": True, "gemm_plugin": "disable"}},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    engine = EngineJson.read(tmp_path)
    assert (engine.backend, engine.version, engine.world_size) == ("torch", "", 6)
    assert engine.is_paged_kv_cache  # no kv_cache_type: the older plugin flag
    assert not engine.is_plugin_enabled("gemm_plugin")


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "config.json: missing; the fix"),
        ("{", "config.json: not valid JSON"),
        ("[]", "must hold a JSON object"),
        ('{"build_config": {}}', "no 'pretrained_config' object; the fix"),
        ('{"pretrained_config": {}, "build_config": 3}', "no 'build_config' object"),
    ],
)
def test_a_broken_file_is_named_with_the_fix(text, message, tmp_path):
    if text is not None:
        (tmp_path / "config.json").write_text(text)
    with pytest.raises(ArtifactError, match=message):
        EngineJson.read(tmp_path, "the fix")


def _parses_engine_json(path: Path) -> bool:
    """A module that loads JSON itself and then looks up an engine's sections in it."""
    tree = ast.parse(path.read_text())
    loads = any(
        isinstance(n, ast.Call)
        and ast.unparse(n.func) in ("json.loads", "json.load", "read_json_object")
        for n in ast.walk(tree)
    )
    looks_up = any(
        isinstance(n, ast.Subscript | ast.Call)
        and any(
            isinstance(c, ast.Constant) and c.value in SECTIONS
            for c in ([n.slice] if isinstance(n, ast.Subscript) else n.args)
        )
        for n in ast.walk(tree)
    )
    return loads and looks_up


def test_no_other_module_parses_an_engine_config():
    readers = sorted(
        str(path.relative_to(REPO))
        for package in ("pipeline", "scripts")
        for path in (REPO / package).rglob("*.py")
        if path != READER and _parses_engine_json(path)
    )
    assert readers == [], f"read the engine's config.json with pipeline.engine_json: {readers}"
