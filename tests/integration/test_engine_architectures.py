"""Tiny random Llama (llama3 / linear RoPE scaling), Mistral and Qwen2 (qkv bias): convert ->
build (backend=torch) -> engine greedy tokens equal transformers' on CPU. Also drives the
decode path through CudaGraphRunner's static, padded buffers (graph replay run eagerly)."""

import pytest
import torch
from tokenizers import Tokenizer, models
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from pipeline.backends.torch_backend import TorchBackend
from pipeline.checkpoint.hf_to_trtllm import convert
from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.execution.cuda_graph_runner import CudaGraphRunner, capture_token_counts
from tests.conftest import make_spec

VOCAB = 128
SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    initializer_range=0.2,
    max_position_embeddings=256,
    tie_word_embeddings=False,
)
MODELS = {
    "llama3_rope": (
        LlamaForCausalLM,
        LlamaConfig(
            **SHAPE,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        ),
    ),
    "linear_rope": (
        LlamaForCausalLM,
        LlamaConfig(
            **SHAPE, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}
        ),
    ),
    "mistral": (MistralForCausalLM, MistralConfig(**SHAPE, sliding_window=None)),
    "qwen2_bias": (Qwen2ForCausalLM, Qwen2Config(**SHAPE)),
}
PROMPTS = [[5, 17, 3, 99, 42, 8, 8, 61], [100, 2], list(range(20, 57))]


def tokenizer_dir(path):
    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, "t0")), eos_token="t1"
    )
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module", params=sorted(MODELS))
def tiny(request, tmp_path_factory):
    """(HF model, engine dir) for one architecture."""
    torch.manual_seed(0)
    cls, cfg = MODELS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    model = cls(cfg).eval()
    model.generation_config.eos_token_id = None  # run to max_new_tokens, like ignore_eos
    model.save_pretrained(root / "hf")
    tokenizer_dir(root / "hf")
    (root / "ckpt").mkdir()
    convert(root / "hf", root / "ckpt", "float32", 1, 1)
    spec = make_spec(
        "build",
        "backend=torch",
        "build.max_seq_len=96",
        "build.max_input_len=64",
        "build.tokens_per_block=8",
        "build.max_batch_size=4",
        workdir=root / "work",
    )
    (root / "engine").mkdir()
    TorchBackend(spec).build(root / "ckpt", root / "hf", root / "engine")
    return model, root / "engine"


def hf_greedy(model, prompt: list[int], num_tokens: int) -> list[int]:
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt)),
            max_new_tokens=num_tokens,
            do_sample=False,
            pad_token_id=0,
        )
    return out[0, len(prompt) :].tolist()


def test_greedy_tokens_equal_transformers(tiny):
    model, engine_dir = tiny
    engine = LLMEngine.from_engine_dir(engine_dir, device="cpu", max_num_tokens=24)
    outputs = engine.generate(PROMPTS, SamplingParams(max_tokens=12, ignore_eos=True))
    assert [o.token_ids for o in outputs] == [hf_greedy(model, p, 12) for p in PROMPTS]


class EagerGraph:
    """Stands in for torch.cuda.CUDAGraph on CPU: replay() recomputes from the static buffers."""

    def __init__(self, runner: CudaGraphRunner, key: tuple[str, int]):
        self.runner, self.key = runner, key
        self.num_replays = 0

    def replay(self) -> None:
        self.runner.outputs[self.key] = self.runner._step(*self.key)
        self.num_replays += 1


@pytest.mark.parametrize("num_scheduler_steps", [1, 3])
def test_padded_static_buffer_graphs_equal_eager(tiny, num_scheduler_steps):
    """Mixed steps (prompts padded to 64 tokens and 4 sequences) and decode steps (padded
    batches; with 3 steps a launch, the decode steps after a launch's first share its block
    tables) through the graphs' static buffers give transformers' greedy tokens."""
    model, engine_dir = tiny
    engine = LLMEngine.from_engine_dir(
        engine_dir, device="cpu", max_num_tokens=24, num_scheduler_steps=num_scheduler_steps
    )
    runner = engine.model_runner
    graphs = CudaGraphRunner(
        runner.model,
        runner.kv_cache,
        4,
        runner.max_blocks_per_seq,
        scratch_block=runner.num_kv_blocks,
        max_num_tokens=24,
    )
    assert graphs.batch_sizes == [1, 2, 4] and graphs.token_counts == [24]
    keys = [("decode", b) for b in graphs.batch_sizes] + [("mixed", 24)]
    for key in keys:
        graphs.graphs[key] = EagerGraph(graphs, key)
    runner.graphs = graphs
    # chunked prompts mixed with decodes; the shortest request leaves after 3 tokens
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (10, 3, 10)]
    outputs = engine.generate(PROMPTS, params)
    assert [o.token_ids for o in outputs] == [
        hf_greedy(model, p, n) for p, n in zip(PROMPTS, (10, 3, 10), strict=True)
    ]
    assert graphs.graphs[("mixed", 24)].num_replays > 0
    assert graphs.graphs[("decode", 2)].num_replays > 0
    stats = engine.stats()
    assert (stats["num_steps"] > stats["num_launches"]) == (num_scheduler_steps > 1)


def test_graph_token_counts_double_up_to_the_step_budget():
    assert capture_token_counts(8192) == [64, 128, 256, 512, 1024, 2048, 4096, 8192]
    assert capture_token_counts(24) == [24]
    assert capture_token_counts(100) == [64, 100]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("max_num_tokens", [24, 3])
def test_cuda_graphs_mixed_and_decode_equal_transformers(tiny, max_num_tokens):
    """On the GPU, captured for real: prompts chunked over mixed steps (the varlen kernel in
    padded mixed graphs; 3 tokens is below the 4 padded sequences) and decode graphs give
    transformers' greedy tokens."""
    model, engine_dir = tiny
    engine = LLMEngine.from_engine_dir(engine_dir, device="cuda", max_num_tokens=max_num_tokens)
    assert engine.stats()["cuda_graph_token_counts"] == [max_num_tokens]
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (10, 3, 10)]
    outputs = engine.generate(PROMPTS, params)
    assert [o.token_ids for o in outputs] == [
        hf_greedy(model, p, n) for p, n in zip(PROMPTS, (10, 3, 10), strict=True)
    ]
