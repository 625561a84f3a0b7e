"""backend=trtllm: the shared four models + the tensorrtllm backend's `tensorrt_llm` (written by
TrtllmBackend from the hand-written engine fixture) form one valid repository."""

from pathlib import Path

from pipeline.backends import load_backend
from pipeline.triton_repo.repo_writer import write_repository
from tests.conftest import REPO, make_spec
from tests.unit.triton_repo.repo_helpers import read_config

ENGINE = REPO / "tests" / "fixtures" / "trtllm_engine"


def test_trtllm_repository_validates_with_the_shared_ensemble(tmp_path: Path):
    spec = make_spec("deploy", "backend=trtllm", "hardware=h100", workdir=tmp_path)
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    facts = write_repository(
        load_backend(spec), ENGINE, tokenizer, tmp_path / "repo", spec.deploy
    )  # raises ConfigError if any rule fails
    assert facts["triton_max_batch_size"] == 8
    llm = read_config(tmp_path / "repo", "tensorrt_llm")
    assert llm.backend == "tensorrtllm" and llm.model_transaction_policy.decoupled
    mapped = read_config(tmp_path / "repo", "ensemble").ensemble_scheduling.step[1].input_map
    assert set(mapped) <= {t.name for t in llm.input}
