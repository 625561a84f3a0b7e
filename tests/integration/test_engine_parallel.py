"""Tensor- and pipeline-parallel engines on the CPU (gloo, one process a rank): greedy tokens equal
the one-rank engine's, for the real SmolLM2 (fp32; 9 heads and 3 KV heads: TP=3 gives each rank
one KV head) and for a small random Llama, with chunked prompts, preemption, several steps a
launch and overlap scheduling, at TP=2, PP=2, TP=2 x PP=2 and TP=4 (two ranks a KV head), and
quantized linears split as modelopt's export splits them."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from pipeline.backends.torch_backend import build_engine_dir
from pipeline.checkpoint.hf_to_trtllm import convert
from pipeline.checkpoint.sharding import pad_rows, split, split_kv
from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.quant.synthetic import QUANTIZATION, export_like_modelopt
from pipeline.specs.build import BuildSpec

pytestmark = pytest.mark.slow

SMOLLM_PROMPTS = ["The capital of France is", "def fibonacci(n):", "Water boils at"]
SMOLLM_BUILD = BuildSpec(
    max_batch_size=8, max_input_len=192, max_seq_len=256, max_num_tokens=256, tokens_per_block=16
)
TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=130,  # not a multiple of 4: the split head and embedding are padded
    initializer_range=0.2,
    max_position_embeddings=256,
)
TINY_PROMPTS = [[5, 17, 3, 99, 42, 8, 8, 61], [100, 2], list(range(20, 57)), [7] * 30]
# chunked prompts (16 tokens a step) and a cache too small for all four at once (preemption)
TINY_BUILD = BuildSpec(
    max_batch_size=4, max_input_len=64, max_seq_len=96, max_num_tokens=16, tokens_per_block=8
)
TINY_RUNTIME = dict(
    num_kv_blocks=14,
    scheduler_policy="max_utilization",
    overlap_scheduling=True,
    num_scheduler_steps=3,
)
LINEARS = ("attention.qkv", "attention.dense", "mlp.fc", "mlp.gate", "mlp.proj")


def engine_dir(hf_dir, root, build: BuildSpec, tp: int, pp: int, dtype: str = "float32"):
    ckpt, out = root / f"ckpt-tp{tp}-pp{pp}", root / f"engine-tp{tp}-pp{pp}"
    ckpt.mkdir()
    out.mkdir()
    convert(hf_dir, ckpt, dtype, tp, pp)
    build_engine_dir(build, ckpt, hf_dir, out)
    return out


def greedy(path, prompts, max_tokens: int, **runtime) -> tuple[list[list[int]], dict]:
    engine = LLMEngine.from_engine_dir(path, device="cpu", **runtime)
    try:
        outputs = engine.generate(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        return [o.token_ids for o in outputs], engine.stats()
    finally:
        engine.close()


@pytest.fixture(scope="module")
def smollm_reference(smollm_hf_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("smollm_parallel")
    path = engine_dir(smollm_hf_dir, root, SMOLLM_BUILD, 1, 1)
    return root, greedy(path, SMOLLM_PROMPTS, 12, overlap_scheduling=True)[0]


@pytest.mark.parametrize(("tp", "pp"), [(3, 1), (1, 2)])
def test_smollm2_split_greedy_tokens_equal_one_rank(smollm_hf_dir, smollm_reference, tp, pp):
    root, expected = smollm_reference
    path = engine_dir(smollm_hf_dir, root, SMOLLM_BUILD, tp, pp)
    tokens, stats = greedy(path, SMOLLM_PROMPTS, 12, overlap_scheduling=True, num_scheduler_steps=2)
    assert tokens == expected
    assert stats["num_free_blocks"] == stats["num_total_blocks"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_parallel")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**TINY)).eval().save_pretrained(root / "hf")
    vocab = {f"t{i}": i for i in range(TINY["vocab_size"])}
    tokenizer = Tokenizer(models.WordLevel(vocab, "t0"))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="t1").save_pretrained(root / "hf")
    reference = engine_dir(root / "hf", root, TINY_BUILD, 1, 1)
    return root, greedy(reference, TINY_PROMPTS, 24, **TINY_RUNTIME)


@pytest.mark.parametrize(("tp", "pp"), [(2, 1), (1, 2), (2, 2), (4, 1)])
def test_tiny_split_greedy_tokens_equal_one_rank(tiny, tp, pp):
    root, (expected, reference_stats) = tiny
    tokens, stats = greedy(
        engine_dir(root / "hf", root, TINY_BUILD, tp, pp), TINY_PROMPTS, 24, **TINY_RUNTIME
    )
    assert tokens == expected
    assert reference_stats["num_preemptions"] > 0  # the scenario preempts; so must the split
    assert stats["num_preemptions"] > 0
    assert stats["num_free_blocks"] == stats["num_total_blocks"]


def quantize_rank0(tensors: dict, algo: str) -> dict:
    """modelopt's tensors for every decoder linear of a one-rank checkpoint (lm_head stays
    dense, as modelopt keeps it)."""
    out = dict(tensors)
    for name in [
        n for n in tensors if n.endswith(".weight") and any(f".{p}." in n for p in LINEARS)
    ]:
        prefix = name.removesuffix(".weight")
        del out[name]
        out |= export_like_modelopt(algo, prefix, tensors[name], None, act_amax=4.0)
    return out


def shard_quantized(tensors: dict, cfg: dict, tp: int, rank: int) -> dict:
    """One rank of a quantized one-rank checkpoint, split as modelopt's TensorRT-LLM export splits
    it: output rows (with their per-row scales) of qkv / fc / gate and the head, input columns
    of dense / proj; per-tensor scales on every rank."""
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    q_rows = heads * cfg["head_size"]
    out = {}
    for name, t in tensors.items():
        linear = next((p for p in LINEARS if f".{p}." in name), None)
        per_row = name.endswith(".weight") or (
            t.numel() > 1 and name.endswith("weights_scaling_factor")
        )
        if name == "lm_head.weight":
            t = split(pad_rows(t, tp), tp, rank, 0)
        elif linear == "attention.qkv" and per_row:
            q, kv = t[:q_rows], t[q_rows:]
            k, v = kv.chunk(2)
            t = torch.cat(
                [
                    split(q, tp, rank, 0),
                    split_kv(k, kv_heads, tp, rank),
                    split_kv(v, kv_heads, tp, rank),
                ]
            )
        elif linear in ("mlp.fc", "mlp.gate") and per_row:
            t = split(t, tp, rank, 0)
        elif linear in ("attention.dense", "mlp.proj") and name.endswith(".weight"):
            t = split(t, tp, rank, 1)
        out[name] = t
    return out


@pytest.mark.parametrize("algo", ["W8A16", "FP8"])
def test_tiny_quantized_tp2_greedy_tokens_equal_one_rank(tiny, algo):
    root = tiny[0]
    base = root / "ckpt-tp1-pp1"
    cfg = json.loads((base / "config.json").read_text())
    tensors = quantize_rank0(load_file(base / "rank0.safetensors"), algo)
    paths = {}
    for tp in (1, 2):
        ckpt, out = root / f"q-{algo}-ckpt-tp{tp}", root / f"q-{algo}-engine-tp{tp}"
        ckpt.mkdir()
        out.mkdir()
        quantized = {**cfg, "quantization": {**QUANTIZATION[algo], "exclude_modules": ["lm_head"]}}
        quantized["mapping"] = {"world_size": tp, "tp_size": tp, "pp_size": 1}
        (ckpt / "config.json").write_text(json.dumps(quantized))
        for rank in range(tp):
            save_file(shard_quantized(tensors, cfg, tp, rank), ckpt / f"rank{rank}.safetensors")
        build_engine_dir(TINY_BUILD, ckpt, root / "hf", out)
        paths[tp] = out
    expected, _ = greedy(paths[1], TINY_PROMPTS, 24, **TINY_RUNTIME)
    tokens, _ = greedy(paths[2], TINY_PROMPTS, 24, **TINY_RUNTIME)
    assert tokens == expected


def test_tiny_pp2_with_more_micro_batches_than_stages_equals_one_rank(tiny, monkeypatch):
    """Prefill-sized launches run twice as many micro-batches as stages (rank 0 decides; the
    others follow its headers): here every launch of 16 tokens runs 4."""
    from pipeline.engine.execution import launch_schedule

    monkeypatch.setattr(launch_schedule, "MICRO_BATCH_MIN_TOKENS", 4)
    assert launch_schedule.micro_batches(16, 2) == 4
    root, (expected, _) = tiny
    path = root / "engine-tp1-pp2"
    if not path.is_dir():
        path = engine_dir(root / "hf", root, TINY_BUILD, 1, 2)
    tokens, stats = greedy(path, TINY_PROMPTS, 24, **TINY_RUNTIME)
    assert tokens == expected
    assert stats["num_free_blocks"] == stats["num_total_blocks"]


@pytest.mark.parametrize(("tp", "pp"), [(2, 1), (1, 2), (2, 2), (4, 1)])
def test_tiny_split_prompt_logits_equal_one_rank_with_a_launch_in_flight(tiny, tp, pp):
    """Prompt logits (perplexity) run on every rank in order with the launches: tensor-parallel
    ranks together, pipeline stages in turn, the last stage's logits sent back to rank 0."""
    root, (greedy_tokens, _) = tiny
    prompts = [[5, 17, 3, 99, 42, 8], [100, 2, 7, 7, 61, 1]]
    one = LLMEngine.from_engine_dir(root / "engine-tp1-pp1", device="cpu")
    try:
        expected = one.prompt_logits(prompts)
    finally:
        one.close()
    path = root / f"engine-tp{tp}-pp{pp}"
    if not path.is_dir():
        path = engine_dir(root / "hf", root, TINY_BUILD, tp, pp)
    engine = LLMEngine.from_engine_dir(path, device="cpu", **TINY_RUNTIME)
    try:
        running = engine.add_request(TINY_PROMPTS[2], SamplingParams(max_tokens=4, ignore_eos=True))
        # a launch in flight: the ranks take the ids in order with it
        tokens = [t for d in engine.step() if d.request_id == running for t in d.token_ids]
        logits = engine.prompt_logits(prompts)
        while engine.has_unfinished():
            tokens += [t for d in engine.step() if d.request_id == running for t in d.token_ids]
        again = engine.prompt_logits(prompts)  # the stages' links carry on after a score
    finally:
        engine.close()
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(again, expected, rtol=1e-4, atol=1e-4)
    assert tokens == greedy_tokens[2][:4]  # scoring did not disturb the running request
