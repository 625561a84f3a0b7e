"""backend=trtllm: the shared four models + the tensorrtllm backend's `tensorrt_llm` (written by
TrtllmBackend from the hand-written engine fixture) form one valid repository, whose ensemble is
the upstream one (postprocessing detokenizes: the tensorrtllm backend cannot)."""

from pathlib import Path

from pipeline.backends import load_backend
from pipeline.triton_repo.interface import RESULT_OUTPUTS
from pipeline.triton_repo.repo_writer import write_repository
from tests.conftest import REPO, make_spec
from tests.unit.triton_repo.repo_helpers import read_config, write_repo

ENGINE = REPO / "tests" / "fixtures" / "trtllm_engine"
UPSTREAM_ENSEMBLE = Path(__file__).parent / "golden" / "ensemble_upstream.pbtxt"
RESULT_NAMES = [spec.name for spec in RESULT_OUTPUTS]


def test_trtllm_repository_validates_with_the_upstream_ensemble(tmp_path: Path):
    # deploy.torch.detokenize is read by backend=torch only
    spec = make_spec(
        "deploy",
        "backend=trtllm",
        "hardware=h100",
        "deploy.torch.detokenize=true",
        workdir=tmp_path,
    )
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    facts = write_repository(
        load_backend(spec), ENGINE, tokenizer, tmp_path / "repo", spec.deploy
    )  # raises ConfigError if any rule fails
    assert facts["triton_max_batch_size"] == 8 and not facts["is_llm_detokenizing"]
    llm = read_config(tmp_path / "repo", "tensorrt_llm")
    assert llm.backend == "tensorrtllm" and llm.model_transaction_policy.decoupled
    mapped = read_config(tmp_path / "repo", "ensemble").ensemble_scheduling.step[1].input_map
    assert set(mapped) <= {t.name for t in llm.input}
    assert (tmp_path / "repo" / "ensemble" / "config.pbtxt").read_text() == (
        UPSTREAM_ENSEMBLE.read_text()
    )
    bls = read_config(tmp_path / "repo", "tensorrt_llm_bls")
    assert bls.parameters["llm_text_output"].string_value == "false"


def test_torch_backend_keeps_the_upstream_ensemble_when_told(tmp_path: Path):
    repo = write_repo(tmp_path, "deploy.torch.tokenize=false", "deploy.torch.detokenize=false")
    assert (repo / "ensemble" / "config.pbtxt").read_text() == UPSTREAM_ENSEMBLE.read_text()
    steps = [s.model_name for s in read_config(repo, "ensemble").ensemble_scheduling.step]
    assert steps == ["preprocessing", "tensorrt_llm", "postprocessing"]


def test_torch_ensemble_is_the_llm_model_alone(tmp_path: Path):
    repo = write_repo(tmp_path)
    steps = read_config(repo, "ensemble").ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["tensorrt_llm"]
    assert steps[0].input_map["text_input"] == "text_input"
    assert steps[0].input_map["request_output_len"] == "max_tokens"
    assert dict(steps[0].output_map) == {
        "text_output": "text_output",
        "sequence_length": "sequence_length",
        **{name: name for name in RESULT_NAMES},  # its own results, as upstream's ensemble
    }
    llm = read_config(repo, "tensorrt_llm")
    assert {"text_input", "stop_words", "bad_words"} <= {t.name for t in llm.input}
    assert "text_output" in {t.name for t in llm.output}
    assert llm.parameters["tokenizer_dir"].string_value == str((tmp_path / "tokenizer").resolve())
    assert llm.parameters["add_special_tokens"].string_value == "true"


def test_torch_ensemble_can_keep_preprocessing(tmp_path: Path):
    repo = write_repo(tmp_path, "deploy.torch.tokenize=false")
    steps = read_config(repo, "ensemble").ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["preprocessing", "tensorrt_llm"]
    assert steps[1].input_map["input_ids"] == "_INPUT_ID"
