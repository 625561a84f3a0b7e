"""backend=trtllm draft-target speculative decoding (deploy.trtllm.spec.method=draft_model): the
build refuses what deploy cannot serve, and deploy writes upstream's draft-target repository.

Upstream, TensorRT-LLM 1.2 (docs/trtllm_reference.md, section 10):
- `examples/draft_target_model/README.md`: "`--use_paged_context_fmha=enable` must be specified
  since we need KV-Cache reuse in this approach" and "`--speculative_decoding_mode=
  draft_tokens_external` and `--max_draft_len` must be specified for target model".
- `triton_backend/all_models/inflight_batcher_llm/tensorrt_llm_bls/config.pbtxt@0193dbd`:
  `parameters: { key: "tensorrt_llm_draft_model_name" value: { string_value:
  "${tensorrt_llm_draft_model_name}" } }` beside `tensorrt_llm_model_name`, and the input
  `num_draft_tokens` TYPE_INT32.
- `tensorrt_llm/models/modeling_utils.py`: `class SpeculativeDecodingMode(IntFlag)`: `NONE =
  auto()`, `DRAFT_TOKENS_EXTERNAL = auto()` (1 and 2: an engine's
  build_config.speculative_decoding_mode).
"""

import json
import shutil
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.backends import load_backend
from pipeline.errors import ConfigError
from pipeline.triton_repo.repo_writer import DRAFT_TARGET, write_repository
from pipeline.trtllm import preflight
from pipeline.trtllm.draft_target import DRAFT_TOKENS_EXTERNAL
from pipeline.trtllm.facts import facts_from_checkpoint
from tests.conftest import make_spec
from tests.unit.triton_repo.repo_helpers import read_config
from tests.unit.trtllm.trtllm_helpers import FIXTURE_ENGINE, trtllm_spec, write_checkpoint

DRAFT = "deploy.trtllm.spec.method=draft_model"
TARGET_BUILD = (
    "build.trtllm.speculative_decoding_mode=draft_tokens_external",
    "build.trtllm.max_draft_len=4",
    "deploy.enable_prefix_caching=true",
)


def engine(root: Path, name: str, **build) -> Path:
    """A copy of the trtllm engine fixture with build_config overrides."""
    path = root / name
    shutil.copytree(FIXTURE_ENGINE, path)
    config = json.loads((path / "config.json").read_text())
    config["build_config"].update(build)
    (path / "config.json").write_text(json.dumps(config))
    return path


def build_problems(tmp_path, *overrides: str) -> list[str]:
    """Preflight's problems at the build (a bfloat16 checkpoint, an H100)."""
    spec = trtllm_spec(tmp_path, *overrides)
    return preflight.violations(facts_from_checkpoint(spec, write_checkpoint(tmp_path / "c"), 90))


def test_a_draft_model_deployment_builds_its_target_for_external_drafts(tmp_path):
    assert build_problems(tmp_path, DRAFT, *TARGET_BUILD) == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            [DRAFT, "deploy.enable_prefix_caching=true"],
            "the target must be built with build.trtllm.speculative_decoding_mode="
            "draft_tokens_external (it is None)",
        ),
        (
            [DRAFT, *TARGET_BUILD, "deploy.trtllm.spec.num_draft_tokens=5"],
            "deploy.trtllm.spec.num_draft_tokens=5: must be in [1, build.trtllm.max_draft_len=4]",
        ),
        (
            [DRAFT, *TARGET_BUILD[:2]],
            "which needs KV cache reuse; set build.trtllm.use_paged_context_fmha=enable",
        ),
        (
            [DRAFT, *TARGET_BUILD, "build.trtllm.use_paged_context_fmha=disable"],
            "which needs KV cache reuse",
        ),
        (
            [DRAFT, *TARGET_BUILD, "build.max_beam_width=2"],
            "build.max_beam_width=2: draft-target speculative decoding runs beam width 1",
        ),
        (
            ["deploy.trtllm.spec.method=prompt_lookup"],
            "deploy.trtllm.spec.method='prompt_lookup': backend=trtllm serves none or draft_model",
        ),
        (
            ["build.trtllm.speculative_decoding_mode=medusa", "build.trtllm.max_draft_len=4"],
            "build.trtllm.speculative_decoding_mode=medusa: deploy cannot serve it",
        ),
    ],
)
def test_build_refuses_what_deploy_cannot_serve(tmp_path, overrides, expected):
    found = build_problems(tmp_path, *overrides)
    assert any(expected in message for message in found), found


def test_build_refuses_a_parallel_target(tmp_path):
    spec = trtllm_spec(tmp_path, DRAFT, *TARGET_BUILD, "parallel.tp_size=2")
    mapping = {"world_size": 2, "tp_size": 2, "pp_size": 1}
    ckpt = write_checkpoint(tmp_path / "c", ranks=2, mapping=mapping)
    found = preflight.violations(facts_from_checkpoint(spec, ckpt, 90))
    assert any(
        "parallel.tp_size=2, pp_size=1: the draft-target deployment runs on one rank" in m
        for m in found
    ), found


def deploy_spec(tmp_path: Path, draft_dir: Path, *overrides: str):
    return make_spec(
        "deploy",
        "backend=trtllm",
        "hardware=h100",
        DRAFT,
        f"deploy.trtllm.spec.draft_engine_dir={draft_dir}",
        "deploy.trtllm.kv_cache_free_gpu_mem_fraction=0.5",
        "deploy.enable_prefix_caching=true",
        *overrides,
        workdir=tmp_path / "workdir",
    )


def write(tmp_path: Path, target: Path, draft: Path, *overrides: str) -> Path:
    spec = deploy_spec(tmp_path, draft, *overrides)
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir(exist_ok=True)
    repo = tmp_path / "repo"
    facts = write_repository(load_backend(spec), target, tokenizer, repo, spec.deploy)
    assert facts["draft_model"] == "tensorrt_llm_draft"
    return repo


def test_deploy_writes_the_draft_model_and_names_it_to_the_bls(tmp_path):
    target = engine(
        tmp_path, "target", speculative_decoding_mode=DRAFT_TOKENS_EXTERNAL, max_draft_len=6
    )
    draft = engine(tmp_path, "draft")
    repo = write(tmp_path, target, draft, "deploy.trtllm.spec.num_draft_tokens=3")
    llm, drafting = read_config(repo, "tensorrt_llm"), read_config(repo, "tensorrt_llm_draft")
    assert drafting.name == "tensorrt_llm_draft" and drafting.backend == "tensorrtllm"
    assert drafting.parameters["gpt_model_path"].string_value == str(draft.resolve())
    assert llm.parameters["gpt_model_path"].string_value == str(target.resolve())
    for cfg in (llm, drafting):
        assert cfg.parameters["enable_kv_cache_reuse"].string_value == "true"
        assert cfg.parameters["kv_cache_free_gpu_mem_fraction"].string_value == "0.5"
        assert "draft_input_ids" in {t.name for t in cfg.input}
    assert (repo / "tensorrt_llm_draft" / "1").is_dir()
    bls = read_config(repo, "tensorrt_llm_bls")
    params = {key: value.string_value for key, value in bls.parameters.items()}
    assert params["tensorrt_llm_model_name"] == "tensorrt_llm"
    assert params["tensorrt_llm_draft_model_name"] == "tensorrt_llm_draft"
    assert params["num_draft_tokens"] == "3" and params["max_draft_len"] == "6"
    num_drafts = next(t for t in bls.input if t.name == "num_draft_tokens")
    assert num_drafts.data_type == mc.TYPE_INT32
    assert (repo / "tensorrt_llm_bls" / "1" / DRAFT_TARGET.name).is_file()


def test_without_a_draft_model_the_bls_names_none(tmp_path):
    spec = make_spec("deploy", "backend=trtllm", "hardware=h100", workdir=tmp_path / "w")
    (tmp_path / "tokenizer").mkdir()
    repo = tmp_path / "repo"
    facts = write_repository(
        load_backend(spec), FIXTURE_ENGINE, tmp_path / "tokenizer", repo, spec.deploy
    )
    assert facts["draft_model"] is None and not (repo / "tensorrt_llm_draft").exists()
    params = read_config(repo, "tensorrt_llm_bls").parameters
    assert "tensorrt_llm_draft_model_name" not in params


@pytest.mark.parametrize(
    ("target_build", "draft_build", "pretrained", "overrides", "expected"),
    [
        (
            {},
            {},
            {},
            (),
            "speculative_decoding_mode=1, not draft_tokens_external (2); rebuild it",
        ),
        (
            {"max_draft_len": 2},
            {},
            {},
            (),
            "deploy.trtllm.spec.num_draft_tokens=4: engine",
        ),
        (
            {"max_draft_len": 4},
            {"max_seq_len": 1024},
            {},
            (),
            "max_seq_len 1024 < the target's 2048; rebuild the draft with build.max_seq_len=2048",
        ),
        (
            {"max_draft_len": 4},
            {},
            {"mapping": {"world_size": 2, "tp_size": 2, "pp_size": 1}},
            (),
            "world size 2, the target's 1: the draft-target deployment runs both engines on one",
        ),
        (
            {"max_draft_len": 4},
            {},
            {"vocab_size": 32000},
            (),
            "vocab_size 32000 != the target's 49152",
        ),
        (
            {"max_draft_len": 4},
            {},
            {},
            ("deploy.trtllm.kv_cache_free_gpu_mem_fraction=0.9",),
            "deploy.trtllm.kv_cache_free_gpu_mem_fraction=0.9: the target and the draft each",
        ),
    ],
)
def test_deploy_refuses_engines_that_cannot_draft_together(
    tmp_path, target_build, draft_build, pretrained, overrides, expected
):
    build = {"speculative_decoding_mode": DRAFT_TOKENS_EXTERNAL, "max_draft_len": 4}
    if not target_build:
        build = {}  # the fixture's: speculative_decoding_mode 1 (NONE), max_draft_len 0
    target = engine(tmp_path, "target", **{**build, **target_build})
    draft = engine(tmp_path, "draft", **draft_build)
    if pretrained:
        config = json.loads((draft / "config.json").read_text())
        config["pretrained_config"].update(pretrained)
        (draft / "config.json").write_text(json.dumps(config))
        if "mapping" in pretrained:  # a plan per rank
            shutil.copy(draft / "rank0.engine", draft / "rank1.engine")
    with pytest.raises(ConfigError) as error:
        write(tmp_path, target, draft, *overrides)
    assert expected in str(error.value)


def test_deploy_refuses_a_missing_draft_engine(tmp_path):
    target = engine(
        tmp_path, "target", speculative_decoding_mode=DRAFT_TOKENS_EXTERNAL, max_draft_len=4
    )
    with pytest.raises(ConfigError, match="draft_engine_dir=.*not a trtllm engine dir"):
        write(tmp_path, target, tmp_path / "no-draft")
