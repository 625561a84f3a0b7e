"""Weight offload on the CPU: an engine whose GPU weight budget streams most decoder layers from
the host store gives the resident engine's greedy tokens and transformers' (the real SmolLM2,
fp32), also with several steps a launch, tensor-parallel ranks, pipeline stages and FP8 linears."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, models
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from pipeline.backends.torch_backend import build_engine_dir
from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.execution.offload_plan import GB
from pipeline.engine.quant.synthetic import QUANTIZATION
from tests.integration.test_engine_parallel import (
    TINY,
    TINY_BUILD,
    TINY_PROMPTS,
    TINY_RUNTIME,
    engine_dir,
    greedy,
    quantize_rank0,
    shard_quantized,
    tiny,  # noqa: F401 - the random Llama fixture
)

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village at the edge of a dark and ancient forest, there lived",
    "Water boils at a temperature of",
]
NUM_NEW_TOKENS = 24
SMOLLM_BUDGET_GB = 0.1  # 7 of SmolLM2's 14.2 MB fp32 layers: 5 resident, 25 of 30 streamed
TINY_LAYER_BYTES = 4 * (128 * 64 + 64 * 64 + 2 * 128 * 64 + 64 * 128)  # fp32 linears, one rank


def offloaded(path, budget_gb: float, **runtime) -> LLMEngine:
    return LLMEngine.from_engine_dir(path, device="cpu", gpu_weight_budget_gb=budget_gb, **runtime)


@pytest.fixture(scope="module")
def prompt_ids(smollm_engine_dir) -> list[list[int]]:
    engine = LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu")
    return [engine.tokenizer.encode(p) for p in PROMPTS]


@pytest.fixture(scope="module")
def hf_greedy(smollm_hf_dir, prompt_ids) -> list[list[int]]:
    model = AutoModelForCausalLM.from_pretrained(smollm_hf_dir, dtype=torch.float32).eval()
    refs = []
    for ids in prompt_ids:
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids)),
                max_new_tokens=NUM_NEW_TOKENS,
                min_new_tokens=NUM_NEW_TOKENS,
                do_sample=False,
            )
        refs.append(out[0, len(ids) :].tolist())
    return refs


def generate(engine: LLMEngine, prompt_ids) -> list[list[int]]:
    params = SamplingParams(max_tokens=NUM_NEW_TOKENS, ignore_eos=True)
    return [o.token_ids for o in engine.generate(prompt_ids, params)]


def test_streamed_smollm2_greedy_tokens_equal_resident_and_transformers(
    smollm_engine_dir, prompt_ids, hf_greedy
):
    resident = LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu")
    assert resident.model_runner.streamer is None
    expected = generate(resident, prompt_ids)
    assert expected == hf_greedy
    engine = offloaded(smollm_engine_dir, SMOLLM_BUDGET_GB)
    streamer = engine.model_runner.streamer
    resident_layers = sorted(set(range(30)) - set(streamer.streamed))
    assert len(streamer.streamed) == 25 and resident_layers == [2, 8, 14, 20, 26]  # spread
    assert generate(engine, prompt_ids) == expected
    # the streamed layers' linears run from the staging buffers, not from the host store
    staging = {t.data_ptr(): t.numel() for t in streamer._staging}
    layer = engine.model_runner.model.layers[streamer.streamed[3]]
    base = layer.mlp.proj.weight.untyped_storage().data_ptr()
    assert base == streamer._staging[3 % 2].data_ptr() and base in staging
    resident_layer = engine.model_runner.model.layers[resident_layers[0]]
    assert resident_layer.mlp.proj.weight.untyped_storage().data_ptr() not in staging
    assert streamer.bound.streamed_bytes == 25 * streamer.layer_bytes
    assert streamer.bound.max_steps_per_s > 0


def test_streamed_smollm2_with_steps_ahead_and_overlap(smollm_engine_dir, prompt_ids, hf_greedy):
    engine = offloaded(
        smollm_engine_dir, SMOLLM_BUDGET_GB, overlap_scheduling=True, num_scheduler_steps=3
    )
    assert generate(engine, prompt_ids) == hf_greedy


def test_budget_below_two_staging_layers_is_refused(smollm_engine_dir):
    with pytest.raises(Exception, match=r"gpu_weight_budget_gb=0.01: below the 2 staging"):
        offloaded(smollm_engine_dir, 0.01)


def test_streamed_tp2_greedy_tokens_equal_one_rank(tiny):  # noqa: F811
    root, (expected, _) = tiny
    path = engine_dir(root / "hf", root, TINY_BUILD, 2, 1)
    # each rank holds half of every linear: 3.4 of its layers fit, 1 resident + 3 streamed
    engine = offloaded(path, 1.7 * TINY_LAYER_BYTES / GB, **TINY_RUNTIME)
    try:
        assert engine.model_runner.streamer.streamed == [0, 2, 3]  # rank 0's shard
        params = SamplingParams(max_tokens=24, ignore_eos=True)
        assert [o.token_ids for o in engine.generate(TINY_PROMPTS, params)] == expected
        assert engine.stats()["num_free_blocks"] == engine.stats()["num_total_blocks"]
    finally:
        engine.close()


def test_streamed_fp8_greedy_tokens_equal_resident_fp8(tiny):  # noqa: F811
    root = tiny[0]
    base = root / "ckpt-tp1-pp1"
    cfg = json.loads((base / "config.json").read_text())
    ckpt, out = root / "offload-fp8-ckpt", root / "offload-fp8-engine"
    ckpt.mkdir()
    out.mkdir()
    quantized = {**cfg, "quantization": {**QUANTIZATION["FP8"], "exclude_modules": ["lm_head"]}}
    (ckpt / "config.json").write_text(json.dumps(quantized))
    tensors = quantize_rank0(load_file(base / "rank0.safetensors"), "FP8")
    save_file(shard_quantized(tensors, cfg, 1, 0), ckpt / "rank0.safetensors")
    build_engine_dir(TINY_BUILD, ckpt, root / "hf", out)
    expected, _ = greedy(out, TINY_PROMPTS, 24, **TINY_RUNTIME)
    # fp8 weights are a quarter of fp32's bytes: 2.5 layers' worth streams 3 of 4
    budget = 3.5 * TINY_LAYER_BYTES / 4 / GB
    engine = offloaded(out, budget, **TINY_RUNTIME)
    try:
        assert len(engine.model_runner.streamer.streamed) == 3
        params = SamplingParams(max_tokens=24, ignore_eos=True)
        assert [o.token_ids for o in engine.generate(TINY_PROMPTS, params)] == expected
    finally:
        engine.close()


def test_streamed_pp2_stages_greedy_tokens_equal_one_resident_rank(tmp_path):
    """Six layers, three a stage: a budget of 2.5 layers streams all three of each stage."""
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**{**TINY, "num_hidden_layers": 6})).eval().save_pretrained(
        tmp_path / "hf"
    )
    vocab = {f"t{i}": i for i in range(TINY["vocab_size"])}
    tokenizer = Tokenizer(models.WordLevel(vocab, "t0"))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="t1").save_pretrained(
        tmp_path / "hf"
    )
    expected, _ = greedy(
        engine_dir(tmp_path / "hf", tmp_path, TINY_BUILD, 1, 1), TINY_PROMPTS, 24, **TINY_RUNTIME
    )
    path = engine_dir(tmp_path / "hf", tmp_path, TINY_BUILD, 1, 2)
    engine = offloaded(path, 2.5 * TINY_LAYER_BYTES / GB, **TINY_RUNTIME)
    try:
        assert engine.model_runner.streamer.streamed == [0, 1, 2]  # rank 0's stage
        params = SamplingParams(max_tokens=24, ignore_eos=True)
        assert [o.token_ids for o in engine.generate(TINY_PROMPTS, params)] == expected
        assert engine.stats()["num_free_blocks"] == engine.stats()["num_total_blocks"]
    finally:
        engine.close()
