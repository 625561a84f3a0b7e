"""LoRA adapters on tensor- and pipeline-parallel engines (CPU, gloo, one process a rank): a small
random Llama with peft adapters gives the one-rank engine's greedy tokens at TP=2, PP=2 and
TP=2 x PP=2, with adapters and the base model mixed in a batch and one device slot, so they take
turns in it (rank 0's slot loads reach the other ranks before each launch), and with an adapter
added to the adapter dir while the engine runs."""

import shutil

import pytest
import torch
from tokenizers import Tokenizer, models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from pipeline.backends.torch_backend import build_engine_dir
from pipeline.checkpoint.hf_to_trtllm import convert
from pipeline.engine import LLMEngine, SamplingParams
from pipeline.specs.build import BuildSpec
from tests.integration.lora_adapters import make_adapter

pytestmark = pytest.mark.slow

TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
    initializer_range=0.2,
    max_position_embeddings=256,
)
BUILD = BuildSpec(
    max_batch_size=4, max_input_len=64, max_seq_len=96, max_num_tokens=32, tokens_per_block=8
)
PROMPTS = [[5, 17, 3, 99, 42, 8, 8, 61], [100, 2], list(range(20, 57)), [7] * 30]
NAMES = ["a", None, "b", "a"]  # None: the base model
ADAPTERS = {"a": (8, 16, 1), "b": (4, 8, 2)}  # name -> (rank, alpha, seed)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_lora_parallel")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**TINY)).eval().save_pretrained(root / "hf")
    vocab = {f"t{i}": i for i in range(TINY["vocab_size"])}
    tokenizer = Tokenizer(models.WordLevel(vocab, "t0"))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="t1").save_pretrained(root / "hf")
    for name, (rank, alpha, seed) in ADAPTERS.items():
        make_adapter(root / "hf", root / "adapters" / name, rank, alpha, seed)
    return root


def engine_for(tiny, tp: int, pp: int, adapter_dir) -> LLMEngine:
    ckpt, out = tiny / f"ckpt-tp{tp}-pp{pp}", tiny / f"engine-tp{tp}-pp{pp}"
    if not out.is_dir():
        ckpt.mkdir()
        out.mkdir()
        convert(tiny / "hf", ckpt, "float32", tp, pp)
        build_engine_dir(BUILD, ckpt, tiny / "hf", out)
    return LLMEngine.from_engine_dir(
        out, device="cpu", lora_dir=str(adapter_dir), lora_max_rank=8, lora_max_loras=1,
        overlap_scheduling=True, num_scheduler_steps=2,
    )  # fmt: skip


def generate(engine: LLMEngine, names: list[str | None]) -> list[list[int]]:
    params = [SamplingParams(max_tokens=16, ignore_eos=True, lora_name=n) for n in names]
    return [o.token_ids for o in engine.generate(PROMPTS[: len(names)], params)]


def greedy(tiny, tp: int, pp: int, names: list[str | None]) -> list[list[int]]:
    engine = engine_for(tiny, tp, pp, tiny / "adapters")
    try:
        return generate(engine, names)
    finally:
        engine.close()


@pytest.fixture(scope="module")
def one_rank(tiny) -> list[list[int]]:
    return greedy(tiny, 1, 1, NAMES)


def test_adapters_change_the_one_rank_tokens(tiny, one_rank):
    # equality below would hold for the base model alone if the adapters did nothing
    base = greedy(tiny, 1, 1, [None] * len(PROMPTS))
    assert [t != b for t, b in zip(one_rank, base, strict=True)] == [n is not None for n in NAMES]


@pytest.mark.parametrize(("tp", "pp"), [(2, 1), (1, 2), (2, 2)])
def test_split_engine_with_adapters_equals_one_rank(tiny, one_rank, tp, pp):
    assert greedy(tiny, tp, pp, NAMES) == one_rank


def test_adapter_added_while_serving_reaches_every_rank(tiny, one_rank, tmp_path):
    # the other rank has not read it: rank 0's slot load names it by task id, and that rank
    # reads the adapter dir again
    adapter_dir = tmp_path / "adapters"
    shutil.copytree(tiny / "adapters", adapter_dir)
    engine = engine_for(tiny, 2, 1, adapter_dir)
    try:
        shutil.copytree(adapter_dir / "a", adapter_dir / "c")
        assert generate(engine, ["c"]) == one_rank[:1]  # NAMES[0] is "a"
    finally:
        engine.close()
