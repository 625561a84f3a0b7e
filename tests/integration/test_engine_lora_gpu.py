"""Multi-LoRA on CUDA with the real SmolLM2 (fp32): the Triton kernels under CUDA graphs give
HF + peft's merged greedy tokens, each adapter alone (its decode steps through the BGMV
kernels) and all of them with the base in one batch (SGMV). Skipped without a GPU; run on one
with `python -m pytest -m gpu tests/integration/test_engine_lora_gpu.py -q`."""

import pytest
import torch

from pipeline.engine import LLMEngine, SamplingParams
from tests.integration.lora_adapters import ADAPTERS, make_adapters, merged_greedy

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

PROMPTS = ["The capital of France is", "def fibonacci(n):"]
NUM_NEW_TOKENS = 12
NAMES = [None, *ADAPTERS]


@pytest.fixture(scope="module")
def engine(smollm_engine_dir, smollm_hf_dir, tmp_path_factory) -> LLMEngine:
    adapter_dir = make_adapters(smollm_hf_dir, tmp_path_factory.mktemp("adapters"))
    return LLMEngine.from_engine_dir(
        smollm_engine_dir, device="cuda", lora_dir=str(adapter_dir), lora_max_rank=16,
        lora_max_loras=3, num_kv_blocks=128,
    )  # fmt: skip


@pytest.fixture(scope="module")
def references(smollm_hf_dir, engine) -> tuple[list[list[int]], dict]:
    prompt_ids = [engine.tokenizer.encode(p) for p in PROMPTS]
    adapter_dir = engine.model_runner.lora.options.adapter_dir
    refs = {
        name: merged_greedy(
            smollm_hf_dir,
            None if name is None else adapter_dir / name,
            prompt_ids,
            NUM_NEW_TOKENS,
            engine.eos_token_ids,
        )
        for name in NAMES
    }
    return prompt_ids, refs


def test_kernels_and_graphs_are_on(engine):
    lora = engine.model_runner.lora
    assert lora.batch.bgmv is not None and lora.batch.sgmv is not None
    assert engine.model_runner.graphs is not None


@pytest.mark.parametrize("name", NAMES)
def test_batch_1_decode_equals_merged_peft(engine, references, name):
    prompt_ids, refs = references
    params = SamplingParams(max_tokens=NUM_NEW_TOKENS, lora_name=name)
    for i, ids in enumerate(prompt_ids):  # one request at a time: batch-1 decode steps
        assert engine.generate([ids], params)[0].token_ids == refs[name][i]


def test_adapters_and_base_in_one_batch_equal_merged_peft(engine, references):
    prompt_ids, refs = references
    prompts = [ids for ids in prompt_ids for _ in NAMES]
    params = [
        SamplingParams(max_tokens=NUM_NEW_TOKENS, lora_name=n) for _ in prompt_ids for n in NAMES
    ]
    outputs = engine.generate(prompts, params)
    expected = [refs[n][i] for i in range(len(prompt_ids)) for n in NAMES]
    assert [o.token_ids for o in outputs] == expected
