"""Engine config.json -> deploy facts, and Triton's max_batch_size derived from it."""

import pytest

from pipeline.errors import ArtifactError, ConfigError
from pipeline.triton_repo.engine_info import EngineInfo, triton_max_batch_size
from tests.conftest import make_spec
from tests.unit.triton_repo.repo_helpers import engine_dir


def test_reads_the_build_limits(tmp_path):
    info = EngineInfo.read(engine_dir(tmp_path, max_batch_size=6))
    assert (info.max_batch_size, info.max_input_len, info.max_seq_len, info.world_size) == (
        6,
        192,
        256,
        1,
    )


def test_unreadable_engine_config(tmp_path):
    (tmp_path / "config.json").write_text('{"build_config": {}}')
    with pytest.raises(ArtifactError, match="re-run `make build`"):
        EngineInfo.read(tmp_path)


@pytest.mark.parametrize("value, expected", [(0, 8), (4, 4)])
def test_triton_max_batch_size_defaults_to_the_engine(tmp_path, value, expected):
    spec = make_spec("deploy", f"deploy.triton_max_batch_size={value}", workdir=tmp_path)
    assert triton_max_batch_size(spec.deploy, EngineInfo.read(engine_dir(tmp_path))) == expected


def test_negative_triton_max_batch_size(tmp_path):
    spec = make_spec("deploy", "deploy.triton_max_batch_size=-1", workdir=tmp_path)
    with pytest.raises(ConfigError, match="deploy.triton_max_batch_size=-1 is negative"):
        triton_max_batch_size(spec.deploy, EngineInfo.read(engine_dir(tmp_path)))
