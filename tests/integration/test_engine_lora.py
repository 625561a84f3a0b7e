"""Multi-LoRA on the real SmolLM2 (fp32, CPU): three peft adapters of different ranks and the
base model, alone and mixed in one batch, give HF + peft's merged greedy tokens; fewer device
slots than adapters (LRU eviction, admission) give the same tokens; bad adapters fail clearly."""

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.lora.manager import UnknownAdapter
from pipeline.errors import ConfigError
from tests.integration.lora_adapters import ADAPTERS, make_adapter, make_adapters, merged_greedy

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "List three primary colors:",
]
NUM_NEW_TOKENS = 12
NAMES = [None, *ADAPTERS]  # None: the base model


@pytest.fixture(scope="module")
def adapter_dir(smollm_hf_dir, tmp_path_factory):
    return make_adapters(smollm_hf_dir, tmp_path_factory.mktemp("adapters"))


@pytest.fixture(scope="module")
def engine(smollm_engine_dir, adapter_dir) -> LLMEngine:
    return LLMEngine.from_engine_dir(
        smollm_engine_dir,
        device="cpu",
        overlap_scheduling=True,
        lora_dir=str(adapter_dir),
        lora_max_rank=16,
        lora_max_loras=3,
    )


@pytest.fixture(scope="module")
def prompt_ids(engine) -> list[list[int]]:
    return [engine.tokenizer.encode(p) for p in PROMPTS]


@pytest.fixture(scope="module")
def references(smollm_hf_dir, adapter_dir, prompt_ids, engine) -> dict:
    return {
        name: merged_greedy(
            smollm_hf_dir,
            None if name is None else adapter_dir / name,
            prompt_ids,
            NUM_NEW_TOKENS,
            engine.eos_token_ids,
        )
        for name in NAMES
    }


def test_references_differ_per_adapter(references):
    # each adapter changes the output: equality below is not the base model's tokens
    assert len({json.dumps(tokens) for tokens in references.values()}) == len(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_each_adapter_alone_equals_merged_peft(engine, prompt_ids, references, name):
    params = SamplingParams(max_tokens=NUM_NEW_TOKENS, lora_name=name)
    outputs = engine.generate(prompt_ids, params)
    assert [o.token_ids for o in outputs] == references[name]


def test_adapters_and_base_mixed_in_one_batch(engine, prompt_ids, references):
    # 2 prompts x (base + 3 adapters): the engine's 8 rows, one batch
    prompts = [ids for ids in prompt_ids[:2] for _ in NAMES]
    params = [
        SamplingParams(max_tokens=NUM_NEW_TOKENS, lora_name=n) for _ in range(2) for n in NAMES
    ]
    before = engine.stats()["num_steps"]
    outputs = engine.generate(prompts, params)
    assert [o.token_ids for o in outputs] == [references[n][i] for i in range(2) for n in NAMES]
    # together: fewer steps than two requests one after the other
    assert engine.stats()["num_steps"] - before < 2 * NUM_NEW_TOKENS


def test_fewer_slots_than_adapters_evict_and_wait(
    smollm_engine_dir, adapter_dir, prompt_ids, references
):
    # one device slot: adapters take turns in it; the base model runs beside any of them
    engine = LLMEngine.from_engine_dir(
        smollm_engine_dir, device="cpu", lora_dir=str(adapter_dir), lora_max_rank=16,
        lora_max_loras=1,
    )  # fmt: skip
    prompts = [prompt_ids[0]] * len(NAMES)
    params = [SamplingParams(max_tokens=NUM_NEW_TOKENS, lora_name=n) for n in NAMES]
    outputs = engine.generate(prompts, params)
    assert [o.token_ids for o in outputs] == [references[n][0] for n in NAMES]


def test_unknown_adapter_names_the_known_ones_and_a_new_one_is_read(
    engine, adapter_dir, smollm_hf_dir, prompt_ids, references
):
    with pytest.raises(UnknownAdapter, match=r"'delta' is unknown \(known: alpha, beta, gamma\)"):
        engine.generate([prompt_ids[0]], SamplingParams(lora_name="delta"))
    # copied into the adapter dir of the running engine: served without a restart
    shutil.copytree(adapter_dir / "alpha", adapter_dir / "delta")
    out = engine.generate(
        [prompt_ids[0]], SamplingParams(max_tokens=NUM_NEW_TOKENS, lora_name="delta")
    )
    assert out[0].token_ids == references["alpha"][0]
    assert engine.lora_names() == ["alpha", "beta", "delta", "gamma"]


def _engine_with(smollm_engine_dir, root, **runtime):
    return LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu", lora_dir=str(root), **runtime)


def test_rank_above_max_rank_is_refused(smollm_engine_dir, smollm_hf_dir, tmp_path):
    make_adapter(smollm_hf_dir, tmp_path / "big", rank=16, alpha=16, seed=4)
    with pytest.raises(ConfigError, match=r"'big'.*r=16 exceeds lora.max_rank=8 \(raise"):
        _engine_with(smollm_engine_dir, tmp_path, lora_max_rank=8)


def test_module_outside_target_modules_is_refused(smollm_engine_dir, smollm_hf_dir, tmp_path):
    make_adapter(smollm_hf_dir, tmp_path / "mlp", 4, 8, 5, ["q_proj", "down_proj"])
    with pytest.raises(ConfigError, match=r"'mlp'.*adapts down_proj .*outside lora.target_modules"):
        _engine_with(smollm_engine_dir, tmp_path, lora_target_modules=("q_proj", "v_proj"))


def test_wrong_shape_and_pickles_are_refused(smollm_engine_dir, smollm_hf_dir, tmp_path):
    path = make_adapter(smollm_hf_dir, tmp_path / "bad", 4, 8, 6, ["q_proj"])
    weights = load_file(path / "adapter_model.safetensors")
    key = next(k for k in weights if "lora_A" in k)
    weights[key] = weights[key][:, :100].contiguous()  # another base's hidden size
    save_file(weights, path / "adapter_model.safetensors")
    with pytest.raises(ConfigError, match=r"'bad'.*has shape \[4, 100\], not \[4, 576\]"):
        _engine_with(smollm_engine_dir, tmp_path)
    (path / "adapter_model.safetensors").rename(path / "adapter_model.bin")
    with pytest.raises(Exception, match=r"'bad'.*adapter_model.bin, a pickle"):
        _engine_with(smollm_engine_dir, tmp_path)
