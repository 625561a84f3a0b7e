"""No code from a model repository runs: no setting claims to allow it, and no loader asks for
it (transformers runs a repository's code only with trust_remote_code=True)."""

import ast

import pytest

from pipeline.errors import ConfigError
from tests.conftest import REPO, make_spec


def test_there_is_no_setting_that_claims_to_allow_remote_code(tmp_path):
    with pytest.raises(ConfigError) as err:
        make_spec("convert", "+model.trust_remote_code=true", workdir=tmp_path)
    assert "model.trust_remote_code: unknown key" in str(err.value)


def test_no_loader_passes_trust_remote_code():
    found = []
    for path in sorted([*(REPO / "pipeline").rglob("*.py"), *(REPO / "scripts").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            is_keyword = isinstance(node, ast.keyword) and node.arg == "trust_remote_code"
            is_key = isinstance(node, ast.Constant) and node.value == "trust_remote_code"
            if is_keyword or is_key:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []
