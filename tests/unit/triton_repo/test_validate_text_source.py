"""Who reads the ensemble's text_input and makes its text_output: the wiring rules, each with a
failing example."""

import pytest

from tests.unit.triton_repo.repo_helpers import read_config, write_repo
from tests.unit.triton_repo.test_validate import edit, problems


@pytest.fixture
def repo(tmp_path):
    return write_repo(tmp_path)


def test_outputs_from_two_steps(tmp_path):
    repo = write_repo(tmp_path, "deploy.torch.tokenize=false", "deploy.torch.detokenize=false")

    def text_from_the_llm(cfg):
        steps = cfg.ensemble_scheduling.step
        del steps[2].output_map["OUTPUT"]
        steps[1].output_map["text_output"] = "text_output"

    edit(repo, "ensemble", text_from_the_llm)
    message = problems(repo)
    assert "its outputs come from steps ['postprocessing', 'tensorrt_llm']" in message


def test_llm_text_without_a_tokenizer(repo):
    edit(repo, "tensorrt_llm", lambda c: c.parameters.pop("tokenizer_dir"))
    assert "tensorrt_llm: gives the ensemble text_output but has no tokenizer_dir" in problems(repo)


def test_llm_text_from_the_tensorrtllm_backend(tmp_path):
    repo = write_repo(tmp_path, "deploy.torch.tokenize=false")
    assert read_config(repo, "ensemble").ensemble_scheduling.step[1].output_map["text_output"]
    message = problems(repo, "trtllm")
    assert (
        "backend=trtllm's tensorrt_llm cannot detokenize; keep the postprocessing step" in message
    )
    assert "cannot tokenize" not in message


def test_llm_text_input_to_the_tensorrtllm_backend(tmp_path):
    repo = write_repo(tmp_path, "deploy.torch.detokenize=false")
    assert read_config(repo, "ensemble").ensemble_scheduling.step[0].input_map["text_input"]
    message = problems(repo, "trtllm")
    assert (
        "tensorrt_llm takes the ensemble's text_input, but backend=trtllm's tensorrt_llm cannot "
        "tokenize; keep the preprocessing step" in message
    )
    assert "cannot detokenize" not in message


def test_llm_text_input_without_a_tokenizer(tmp_path):
    repo = write_repo(tmp_path, "deploy.torch.detokenize=false")
    edit(repo, "tensorrt_llm", lambda c: c.parameters.pop("tokenizer_dir"))
    message = problems(repo)
    assert "tensorrt_llm: takes the ensemble's text_input but has no tokenizer_dir" in message


def test_llm_model_that_does_not_declare_text_output(repo):
    edit(repo, "tensorrt_llm", lambda c: c.output.pop())
    assert "maps output 'text_output', which tensorrt_llm does not declare" in problems(repo)


def test_text_output_of_the_wrong_type(repo):
    edit(repo, "tensorrt_llm", lambda c: setattr(c.output[-1], "data_type", 8))  # TYPE_INT32
    assert "output 'text_output' is TYPE_STRING but its producer gives TYPE_INT32" in problems(repo)
