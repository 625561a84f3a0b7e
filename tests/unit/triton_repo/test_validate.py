"""Each checklist rule (docs/trtllm_reference.md, section 7), a failing example and its message."""

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.errors import ConfigError
from pipeline.triton_repo.validate import check_repository
from tests.unit.triton_repo.repo_helpers import (
    ENGINE_MAX_BATCH_SIZE,
    read_config,
    write_config,
    write_repo,
)


@pytest.fixture
def repo(tmp_path):
    return write_repo(tmp_path)


@pytest.fixture
def upstream_repo(tmp_path):
    """The ensemble with the pre- and postprocessing steps (as backend=trtllm's)."""
    return write_repo(tmp_path, "deploy.torch.tokenize=false", "deploy.torch.detokenize=false")


def problems(repo, backend: str = "torch") -> str:
    with pytest.raises(ConfigError) as info:
        check_repository(repo, ENGINE_MAX_BATCH_SIZE, backend)
    assert "nothing was published" in str(info.value)
    return str(info.value)


def edit(repo, model: str, change) -> None:
    cfg = read_config(repo, model)
    change(cfg)
    write_config(repo, model, cfg)


def test_the_written_repository_is_valid(repo):
    check_repository(repo, ENGINE_MAX_BATCH_SIZE, "torch")


def test_config_that_does_not_parse(repo):
    path = repo / "preprocessing" / "config.pbtxt"
    path.write_text(path.read_text() + "max_queue_delay: 100\n")
    assert "preprocessing/config.pbtxt: does not parse as inference.ModelConfig" in problems(repo)


def test_placeholder_in_a_typed_field_is_named_with_its_line(repo):
    path = repo / "ensemble" / "config.pbtxt"
    text = path.read_text().replace("max_batch_size: 8", "max_batch_size: ${triton_max_batch_size}")
    path.write_text(text)
    message = problems(repo)
    assert "ensemble/config.pbtxt:3: unfilled placeholder '${triton_max_batch_size}'" in message
    assert "ensemble/config.pbtxt: does not parse" in message


def test_placeholder_in_a_string_parameter(repo):
    edit(
        repo,
        "postprocessing",
        lambda c: c.parameters["skip_special_tokens"].__setattr__(
            "string_value", "${skip_special_tokens}"
        ),
    )
    assert "unfilled placeholder '${skip_special_tokens}'" in problems(repo)


def test_missing_model(repo):
    (repo / "postprocessing" / "config.pbtxt").unlink()
    assert "postprocessing: missing" in problems(repo)


def test_missing_version_dir(repo):
    (repo / "ensemble" / "1" / ".gitkeep").unlink()
    (repo / "ensemble" / "1").rmdir()
    assert "ensemble: no version dir" in problems(repo)


def test_python_model_without_model_py(repo):
    (repo / "tensorrt_llm_bls" / "1" / "model.py").unlink()
    assert "tensorrt_llm_bls: python backend but no" in problems(repo)


def test_name_differs_from_directory(repo):
    edit(repo, "preprocessing", lambda c: setattr(c, "name", "preprocess"))
    assert "name 'preprocess' differs from its directory 'preprocessing'" in problems(repo)


def test_duplicate_tensor_names(repo):
    edit(
        repo,
        "ensemble",
        lambda c: c.output.add(name="text_output", data_type=mc.TYPE_STRING, dims=[-1]),
    )
    assert "ensemble: output 'text_output' declared 2 times" in problems(repo)


def test_ensemble_with_instance_group(repo):
    edit(repo, "ensemble", lambda c: c.instance_group.add(count=1))
    assert "ensemble: an ensemble cannot declare instance_group" in problems(repo)


def test_instance_count_below_one(repo):
    edit(repo, "preprocessing", lambda c: setattr(c.instance_group[0], "count", 0))
    assert "preprocessing: instance_group count 0 < 1" in problems(repo)


def test_ensemble_step_names_a_missing_model(upstream_repo):
    edit(
        upstream_repo,
        "ensemble",
        lambda c: setattr(c.ensemble_scheduling.step[2], "model_name", "detokenizer"),
    )
    message = problems(upstream_repo)
    assert "step names model 'detokenizer', which is not in the repository" in message


def test_required_input_left_unmapped(upstream_repo):
    edit(
        upstream_repo,
        "ensemble",
        lambda c: c.ensemble_scheduling.step[1].input_map.pop("request_output_len"),
    )
    message = problems(upstream_repo)
    assert "step 'tensorrt_llm' leaves required inputs ['request_output_len'] unmapped" in message


def test_mapped_input_that_nothing_produces(repo):
    edit(
        repo,
        "ensemble",
        lambda c: c.ensemble_scheduling.step[0].input_map.update({"temperature": "temp"}),
    )
    assert "input 'temperature' <- 'temp': no ensemble input or earlier step" in problems(repo)


def test_dtype_disagreement(repo):
    assert read_config(repo, "ensemble").input[6].name == "temperature"
    edit(repo, "ensemble", lambda c: setattr(c.input[6], "data_type", mc.TYPE_FP64))
    assert (
        "input 'temperature' <- 'temperature': dtype TYPE_FP64 but tensorrt_llm wants TYPE_FP32"
    ) in problems(repo)


def test_dims_disagreement(upstream_repo):
    def one_dim(cfg):
        del cfg.input[0].dims[1:]

    edit(upstream_repo, "postprocessing", one_dim)
    assert (
        "input 'TOKENS_BATCH' <- '_TOKENS_BATCH': dims [-1, -1] but postprocessing wants [-1]"
    ) in problems(upstream_repo)


def test_output_map_of_an_undeclared_output(upstream_repo):
    edit(
        upstream_repo,
        "ensemble",
        lambda c: c.ensemble_scheduling.step[2].output_map.update({"LOGITS": "logits"}),
    )
    assert "maps output 'LOGITS', which postprocessing does not declare" in problems(upstream_repo)


def test_tensor_produced_twice(upstream_repo):
    edit(
        upstream_repo,
        "ensemble",
        lambda c: c.ensemble_scheduling.step[0].output_map.update({"OUT_END_ID": "text_output"}),
    )
    assert "tensor 'text_output' is produced more than once" in problems(upstream_repo)


def writing_fails(tmp_path, *overrides: str) -> str:
    """Invalid deploy settings: the writer's own validation refuses the repository."""
    with pytest.raises(ConfigError) as info:
        write_repo(tmp_path, *overrides)
    return str(info.value)


def test_triton_batch_size_above_the_engine(tmp_path):
    message = writing_fails(tmp_path, "deploy.triton_max_batch_size=16")
    assert "tensorrt_llm: max_batch_size 16" in message
    assert "> the engine's 8; set deploy.triton_max_batch_size <= 8" in message


def test_ensemble_batch_size_above_a_composing_model(upstream_repo):
    edit(upstream_repo, "postprocessing", lambda c: setattr(c, "max_batch_size", 4))
    edit(
        upstream_repo,
        "postprocessing",
        lambda c: c.dynamic_batching.ClearField("preferred_batch_size"),
    )
    message = problems(upstream_repo)
    assert "ensemble: max_batch_size 8 > postprocessing's 4; Triton refuses" in message


def test_preferred_batch_size_above_max(tmp_path):
    message = writing_fails(tmp_path, "deploy.preferred_batch_sizes=[4,16]")
    assert "preferred_batch_size [16] > max_batch_size 8" in message


def test_model_without_batching(repo):
    edit(repo, "preprocessing", lambda c: setattr(c, "max_batch_size", 0))
    edit(repo, "preprocessing", lambda c: c.dynamic_batching.ClearField("preferred_batch_size"))
    assert "preprocessing: max_batch_size 0 < 1" in problems(repo)


def test_torch_backend_serves_either_transaction_policy(tmp_path):
    repo = write_repo(tmp_path, "deploy.decoupled_mode=false")  # raises if invalid
    for name in ("tensorrt_llm", "tensorrt_llm_bls"):
        assert not read_config(repo, name).model_transaction_policy.decoupled


def test_decoupled_llm_and_bls_disagree(repo):
    edit(
        repo, "tensorrt_llm_bls", lambda c: setattr(c.model_transaction_policy, "decoupled", False)
    )
    assert "tensorrt_llm is decoupled=True but tensorrt_llm_bls is decoupled=False" in problems(
        repo
    )


def test_pre_or_postprocessing_decoupled(repo):
    edit(repo, "preprocessing", lambda c: setattr(c.model_transaction_policy, "decoupled", True))
    assert "preprocessing: must not be decoupled" in problems(repo)


def test_relative_tokenizer_dir(repo):
    edit(
        repo,
        "preprocessing",
        lambda c: c.parameters["tokenizer_dir"].__setattr__("string_value", "artifacts/tok"),
    )
    assert "tokenizer_dir='artifacts/tok' must be an absolute path" in problems(repo)


def test_missing_engine_dir(repo, tmp_path):
    edit(
        repo,
        "tensorrt_llm",
        lambda c: c.parameters["engine_dir"].__setattr__("string_value", str(tmp_path / "gone")),
    )
    assert "engine_dir=" in problems(repo) and "is not a directory" in problems(repo)


def test_bad_scheduler_policy(tmp_path):
    message = writing_fails(tmp_path, "deploy.batch_scheduler_policy=fifo")
    assert "batch_scheduler_policy='fifo' is not one of" in message


def tensorrtllm_params(repo, **params) -> None:
    def change(cfg):
        cfg.backend = "tensorrtllm"
        for key, value in params.items():
            cfg.parameters[key].string_value = value

    edit(repo, "tensorrt_llm", change)


def test_tensorrtllm_batching_strategy(repo):
    tensorrtllm_params(repo, gpt_model_type="dynamic")
    assert "gpt_model_type='dynamic' is not one of" in problems(repo, "trtllm")


def test_tensorrtllm_bool_parameter(repo):
    tensorrtllm_params(repo, gpt_model_type="inflight_fused_batching", enable_kv_cache_reuse="yes")
    assert "enable_kv_cache_reuse='yes' is not a bool" in problems(repo, "trtllm")


def test_tensorrtllm_kv_cache_fraction(repo):
    tensorrtllm_params(
        repo, gpt_model_type="inflight_fused_batching", kv_cache_free_gpu_mem_fraction="1.5"
    )
    assert "kv_cache_free_gpu_mem_fraction='1.5' must be in (0, 1]" in problems(repo, "trtllm")


def test_bls_interface_differs_from_the_ensemble(repo):
    edit(repo, "tensorrt_llm_bls", lambda c: c.input.remove(_named(c.input, "temperature")))
    assert "tensorrt_llm_bls: inputs differ from the ensemble's" in problems(repo)


def _named(tensors, name: str):
    return next(t for t in tensors if t.name == name)


def test_bls_may_add_upstream_bls_inputs_but_not_change_the_ensembles(repo):
    bls = read_config(repo, "tensorrt_llm_bls")
    assert {"image_input", "num_draft_tokens"} <= {t.name for t in bls.input}
    edit(repo, "tensorrt_llm_bls", lambda c: _named(c.input, "temperature").dims.append(2))
    assert "tensorrt_llm_bls: inputs differ from the ensemble's" in problems(repo)


def test_every_problem_is_reported_at_once(repo):
    edit(repo, "preprocessing", lambda c: setattr(c, "name", "x"))
    edit(repo, "ensemble", lambda c: c.instance_group.add(count=1))
    assert "(2 problems;" in problems(repo)
