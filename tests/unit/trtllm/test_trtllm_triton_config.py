"""Contract: the hand-written engine dir (tests/fixtures/trtllm_engine, from the reference) feeds
TrtllmBackend.triton_llm_model; the config.pbtxt parses as a Triton ModelConfig with the right
parameters; engines of another TensorRT-LLM version or without the needed features are refused."""

import json
import shutil
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.backends.trtllm_backend import TrtllmBackend
from pipeline.errors import ArtifactError, ConfigError
from pipeline.trtllm.engine_config import read_engine_config
from tests.unit.trtllm.trtllm_helpers import FIXTURE_ENGINE, trtllm_spec


def engine_copy(tmp_path: Path, edit=None) -> Path:
    engine = tmp_path / "engine"
    shutil.copytree(FIXTURE_ENGINE, engine)
    if edit is not None:
        config = json.loads((engine / "config.json").read_text())
        edit(config)
        (engine / "config.json").write_text(json.dumps(config))
    return engine


def generate(tmp_path: Path, engine: Path, *overrides: str) -> mc.ModelConfig:
    backend = TrtllmBackend(trtllm_spec(tmp_path, *overrides))
    model_dir = tmp_path / "repo" / "tensorrt_llm"
    text = backend.triton_llm_model(engine, tmp_path / "tokenizer", model_dir)
    assert (model_dir / "config.pbtxt").read_text() == text
    assert (model_dir / "1").is_dir()
    return text_format.Parse(text, mc.ModelConfig())


def params(config: mc.ModelConfig) -> dict:
    return {k: v.string_value for k, v in config.parameters.items()}


def test_fixture_engine_gives_tensorrtllm_model(tmp_path):
    config = generate(tmp_path, FIXTURE_ENGINE)
    assert config.name == "tensorrt_llm" and config.backend == "tensorrtllm"
    assert config.max_batch_size == 8  # deploy.triton_max_batch_size=0 -> the engine's
    assert config.model_transaction_policy.decoupled is True
    assert list(config.dynamic_batching.preferred_batch_size) == [8]
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert params(config) == {
        "max_beam_width": "1",
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": str(FIXTURE_ENGINE.resolve()),
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": "0.9",
        "enable_kv_cache_reuse": "false",
        "enable_chunked_context": "false",
        "exclude_input_in_output": "true",
        "executor_worker_path": "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
        "guided_decoding_backend": "",
        "xgrammar_tokenizer_info_path": "",
    }
    assert "${" not in text_format.MessageToString(config)


def test_inputs_and_outputs_follow_the_template(tmp_path):
    config = generate(tmp_path, FIXTURE_ENGINE)
    inputs = {t.name: t for t in config.input}
    required = [t.name for t in config.input if not t.optional]
    assert sorted(required) == ["input_lengths", "request_output_len"]
    assert inputs["input_ids"].data_type == mc.TYPE_INT32 and list(inputs["input_ids"].dims) == [-1]
    assert inputs["input_ids"].allow_ragged_batch and inputs["input_ids"].optional
    assert inputs["request_output_len"].HasField("reshape")
    assert list(inputs["stop_words_list"].dims) == [2, -1]
    assert inputs["streaming"].data_type == mc.TYPE_BOOL
    assert inputs["seed"].data_type == mc.TYPE_UINT64
    outputs = {t.name: t for t in config.output}
    assert list(outputs["output_ids"].dims) == [-1, -1]
    assert outputs["context_logits"].data_type == mc.TYPE_FP32  # logits_dtype float32
    assert {"sequence_length", "cum_log_probs", "output_log_probs", "batch_index"} <= set(outputs)


def test_deploy_values_flow_into_the_config(tmp_path):
    config = generate(
        tmp_path,
        FIXTURE_ENGINE,
        "deploy.triton_max_batch_size=4",
        "deploy.decoupled_mode=false",
        "deploy.max_queue_delay_microseconds=100",
        "deploy.max_queue_size=16",
        "deploy.batch_scheduler_policy=max_utilization",
        "deploy.trtllm.kv_cache_free_gpu_mem_fraction=0.5",
        "deploy.trtllm.enable_kv_cache_reuse=true",
        "deploy.trtllm.max_tokens_in_paged_kv_cache=2560",
        "deploy.exclude_input_in_output=false",
    )
    assert config.max_batch_size == 4 and not config.model_transaction_policy.decoupled
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    assert config.dynamic_batching.default_queue_policy.max_queue_size == 16
    p = params(config)
    assert p["batch_scheduler_policy"] == "max_utilization"
    assert p["kv_cache_free_gpu_mem_fraction"] == "0.5"
    assert p["enable_kv_cache_reuse"] == "true" and p["exclude_input_in_output"] == "false"
    assert p["max_tokens_in_paged_kv_cache"] == "2560"


def test_version_mismatch_is_refused(tmp_path):
    engine = engine_copy(tmp_path, lambda c: c.update(version="1.1.0"))
    with pytest.raises(
        ConfigError,
        match=r"built by TensorRT-LLM 1\.1\.0, but the serving "
        r"container .* runs 1\.2\.1",
    ):
        generate(tmp_path, engine)
    assert not (tmp_path / "repo").exists()


def test_serving_version_is_a_config_key(tmp_path):
    engine = engine_copy(tmp_path, lambda c: c.update(version="1.2.0"))
    config = generate(tmp_path, engine, "build.trtllm.trtllm_version=1.2.0")
    assert params(config)["gpt_model_path"] == str(engine.resolve())


def test_reuse_without_paged_context_fmha_is_refused(tmp_path):
    engine = engine_copy(
        tmp_path, lambda c: c["build_config"]["plugin_config"].update(use_paged_context_fmha=False)
    )
    with pytest.raises(
        ConfigError, match="enable_kv_cache_reuse=true: engine .* without paged context FMHA"
    ):
        generate(tmp_path, engine, "deploy.trtllm.enable_kv_cache_reuse=true")


def test_engine_without_inflight_batching_support_is_refused(tmp_path):
    engine = engine_copy(tmp_path, lambda c: c["build_config"].update(kv_cache_type="CONTINUOUS"))
    with pytest.raises(ConfigError, match="in-flight batching needs gpt_attention_plugin"):
        generate(tmp_path, engine)


def test_triton_batch_above_engine_is_refused(tmp_path):
    with pytest.raises(
        ConfigError, match="deploy.triton_max_batch_size=16: above the engine's max_batch_size=8"
    ):
        generate(tmp_path, FIXTURE_ENGINE, "deploy.triton_max_batch_size=16")


def test_engine_built_for_another_gpu_is_refused(tmp_path):
    engine = engine_copy(tmp_path)
    (engine / "manifest.json").write_text(
        json.dumps(
            {
                "stage": "build-trtllm",
                "model": "m",
                "status": "ok",
                "config": {},
                "inputs": {},
                "fingerprint": "",
                "outputs": {},
                "versions": {},
                "wall_time_s": 0,
                "host": "h",
                "created_at": "",
                "extra": {"gpu": {"name": "NVIDIA A100", "sm": 80}},
            }
        )
    )
    with pytest.raises(
        ConfigError,
        match="built on SM 80, TensorRT plans only run on that architecture \\(target SM 90\\)",
    ):
        generate(tmp_path, engine, "hardware=h100")


def test_engine_config_problems_are_reported(tmp_path):
    engine = engine_copy(
        tmp_path, lambda c: (c.pop("version"), c["build_config"].pop("max_num_tokens"))
    )
    with pytest.raises(ArtifactError, match="no 'version'.*build_config.max_num_tokens missing"):
        read_engine_config(engine)
    intact = engine_copy(tmp_path / "b")
    (intact / "rank0.engine").unlink()
    with pytest.raises(ArtifactError, match="rank0.engine missing for world_size=1"):
        read_engine_config(intact)


def test_torch_engine_is_refused(tmp_path):
    engine = engine_copy(tmp_path, lambda c: c.update(backend="torch"))
    with pytest.raises(
        ArtifactError, match="backend='torch': this engine was built by another backend"
    ):
        read_engine_config(engine)


def test_lora_cache_parameters_are_upstreams_and_set_from_lora_cache(tmp_path):
    # tensorrtllm_backend all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt names them
    upstream = {
        "lora_cache_optimal_adapter_size",
        "lora_cache_max_adapter_size",
        "lora_cache_gpu_memory_fraction",
        "lora_cache_host_memory_bytes",
    }
    assert not upstream & set(params(generate(tmp_path / "off", FIXTURE_ENGINE)))

    def lora_engine(config):
        config["pretrained_config"]["dtype"] = "float16"  # what lora_weights are sent in
        config["build_config"]["plugin_config"]["lora_plugin"] = "auto"
        config["build_config"]["lora_config"]["lora_target_modules"] = ["attn_q", "attn_v"]
        config["build_config"]["lora_config"]["max_lora_rank"] = 16

    engine = engine_copy(tmp_path, lora_engine)
    lora = (
        "+lora.adapters.sql=/adapters/sql",
        "lora.max_rank=16",
        "lora.target_modules=[q_proj,v_proj]",
        "lora.cache_gpu_memory_fraction=0.1",
        "lora.cache_host_memory_bytes=1073741824",
        "lora.cache_optimal_adapter_size=16",
        "lora.cache_max_adapter_size=64",
    )
    got = params(generate(tmp_path / "on", engine, *lora))
    assert {k: got[k] for k in upstream} == {
        "lora_cache_optimal_adapter_size": "16",
        "lora_cache_max_adapter_size": "64",
        "lora_cache_gpu_memory_fraction": "0.1",
        "lora_cache_host_memory_bytes": "1073741824",
    }


def test_lora_adapters_need_an_engine_built_for_them(tmp_path):
    with pytest.raises(ConfigError, match=r"LoRA plugin; rebuild with build.trtllm.lora_plugin"):
        generate(tmp_path, FIXTURE_ENGINE, "+lora.adapters.sql=/adapters/sql")

    def rank_8(config):
        config["build_config"]["plugin_config"]["lora_plugin"] = "auto"
        config["build_config"]["lora_config"]["max_lora_rank"] = 8
        config["build_config"]["lora_config"]["lora_target_modules"] = ["attn_q"]

    engine = engine_copy(tmp_path, rank_8)
    # the fixture engine is bfloat16: upstream's tensorrt_llm model takes lora_weights as FP16
    # (config.pbtxt) and the runtime only weights of the engine's dtype (loraUtils.cpp)
    with pytest.raises(
        ConfigError,
        match=r"needs a float16 engine \(this one is bfloat16\).*model.dtype=float16.*"
        r"max_lora_rank=8 is below lora.max_rank=64.*adapts no",
    ):
        generate(tmp_path / "r", engine, "+lora.adapters.sql=/adapters/sql")


def test_guided_decoding_writes_upstreams_tokenizer_info_and_names_it(tmp_path):
    import xgrammar
    from transformers import AutoTokenizer

    from scripts.byte_tokenizer import write_byte_tokenizer

    tokenizer_dir = write_byte_tokenizer(300, tmp_path / "tokenizer")
    repo_dir = tmp_path / "published"
    config = generate(
        tmp_path,
        FIXTURE_ENGINE,
        "deploy.trtllm.guided_decoding_backend=xgrammar",
        f"deploy.repo_dir={repo_dir}",
    )
    info_path = repo_dir.resolve() / "tensorrt_llm" / "xgrammar_tokenizer_info.json"
    assert params(config)["guided_decoding_backend"] == "xgrammar"
    assert params(config)["xgrammar_tokenizer_info_path"] == str(info_path)
    # written into the model dir, published with the repository
    info = json.loads((tmp_path / "repo" / "tensorrt_llm" / info_path.name).read_text())
    assert sorted(info) == ["encoded_vocab", "stop_token_ids", "tokenizer_str"]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    assert info["stop_token_ids"] == [tokenizer.eos_token_id] and len(info["encoded_vocab"]) == 300
    # the executor's reading of it (xgrammar's TokenizerInfo from the vocabulary and the
    # tokenizer's metadata) is xgrammar's own reading of the tokenizer
    metadata = xgrammar.TokenizerInfo._detect_metadata_from_hf(info["tokenizer_str"])
    read = xgrammar.TokenizerInfo.from_vocab_and_metadata(
        info["encoded_vocab"],
        json.dumps(
            {
                "vocab_type": metadata["vocab_type"].value,
                "vocab_size": 300,
                "add_prefix_space": metadata["add_prefix_space"],
                "stop_token_ids": info["stop_token_ids"],
            }
        ),
    )
    direct = xgrammar.TokenizerInfo.from_huggingface(tokenizer)
    assert read.decoded_vocab == direct.decoded_vocab and read.vocab_type == direct.vocab_type


def test_guided_decoding_is_off_unless_asked_and_an_unknown_backend_is_refused(tmp_path):
    values = params(generate(tmp_path, FIXTURE_ENGINE))
    assert values["guided_decoding_backend"] == values["xgrammar_tokenizer_info_path"] == ""
    with pytest.raises(ConfigError, match="guided_decoding_backend='outlines'"):
        generate(tmp_path, FIXTURE_ENGINE, "deploy.trtllm.guided_decoding_backend=outlines")
