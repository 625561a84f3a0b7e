"""HF transformers side of scripts.bench_engine: the baseline models and their timings.

Checkpoint-loaded HF Llamas (so HF and the engine run the same weights), batch-1
decode through `generate` (eager or static cache), static batching, and continuous batching
(`generate_batch`, where this transformers has it).
"""

import inspect
import json
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from scripts.engine_run import prompts_for, sync
from scripts.model_shapes import new_model


def hf_from_checkpoint(ckpt_dir: Path, dtype: torch.dtype, device: torch.device):
    """An HF LlamaForCausalLM holding an unquantized TensorRT-LLM checkpoint's weights."""
    from transformers import LlamaConfig

    cfg = json.loads((ckpt_dir / "config.json").read_text())
    tensors = load_file(ckpt_dir / "rank0.safetensors")
    heads, kv_heads, head_dim = (
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
        cfg["head_size"],
    )
    config = LlamaConfig(
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=cfg["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=cfg["vocab_size"],
        rms_norm_eps=cfg["norm_epsilon"],
        rope_theta=cfg["rotary_base"],
        rope_scaling=cfg.get("rotary_scaling"),
        tie_word_embeddings=False,
        max_position_embeddings=cfg["max_position_embeddings"],
        eos_token_id=None,
    )
    sd = {
        "model.embed_tokens.weight": tensors["transformer.vocab_embedding.weight"],
        "model.norm.weight": tensors["transformer.ln_f.weight"],
        "lm_head.weight": tensors.get(
            "lm_head.weight", tensors["transformer.vocab_embedding.weight"]
        ),
    }
    for i in range(config.num_hidden_layers):
        src, dst = f"transformer.layers.{i}.", f"model.layers.{i}."
        q, k, v = tensors[src + "attention.qkv.weight"].split(
            [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]
        )
        sd |= {
            dst + "self_attn.q_proj.weight": q,
            dst + "self_attn.k_proj.weight": k,
            dst + "self_attn.v_proj.weight": v,
        }
        names = {
            "self_attn.o_proj": "attention.dense",
            "mlp.gate_proj": "mlp.fc",
            "mlp.up_proj": "mlp.gate",
            "mlp.down_proj": "mlp.proj",
            "input_layernorm": "input_layernorm",
            "post_attention_layernorm": "post_layernorm",
        }
        sd |= {f"{dst}{hf}.weight": tensors[f"{src}{trt}.weight"] for hf, trt in names.items()}
    model = new_model(config, dtype, device)
    model.load_state_dict(sd)
    return model


class TokenTimes:
    """A transformers streamer recording when each generated token reaches the host."""

    def __init__(self):
        self.times: list[float] = []
        self.is_prompt = True

    def put(self, value) -> None:
        if self.is_prompt:  # generate() first sends the prompt
            self.is_prompt = False
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def hf_decode(model, prompt: list[int], work, **kwargs) -> tuple[float, list[int]]:
    """Batch-1 decode tok/s between the first and last generated token, and the tokens."""
    ids = torch.tensor([prompt], device=model.device)
    streamer = TokenTimes()
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=work.output_len,
            min_new_tokens=work.output_len,
            streamer=streamer,
            **kwargs,
        )
    times = streamer.times
    return (len(times) - 1) / (times[-1] - times[0]), out[0, len(prompt) :].tolist()


def hf_static_batching(model, work, vocab_size: int) -> dict:
    """Padded-free static batches (all prompts have input_len tokens), EOS suppressed."""
    prompts = prompts_for(vocab_size, work, work.hf_batch * work.hf_num_batches, seed=2)
    batches = [prompts[i : i + work.hf_batch] for i in range(0, len(prompts), work.hf_batch)]
    kwargs = {
        "do_sample": False,
        "max_new_tokens": work.output_len,
        "min_new_tokens": work.output_len,
    }
    num_out, wall_s = 0, 0.0
    with torch.inference_mode():
        for batch in batches:
            ids = torch.tensor(batch, device=model.device)
            sync(model.device)
            start = time.perf_counter()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
            sync(model.device)
            wall_s += time.perf_counter() - start
            num_out += out[:, ids.shape[1] :].numel()
    return {
        "throughput_out_tok_s": num_out / wall_s,
        "num_requests": len(prompts),
        "batch_size": work.hf_batch,
    }


def hf_continuous_batching(model, work, vocab_size: int) -> dict:
    from transformers import GenerationConfig

    if not work.hf_cb_requests:
        return {"error": "skipped (hf_cb_requests=0)"}
    if not hasattr(model, "generate_batch"):
        return {"error": "this transformers has no generate_batch"}
    prompts = prompts_for(vocab_size, work, work.hf_cb_requests, seed=2)
    config = GenerationConfig(
        max_new_tokens=work.output_len, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    kwargs = {}
    if "warmup" in inspect.signature(model.generate_batch).parameters:  # transformers >= 5.2x
        kwargs["warmup"] = work.hf_cb_warmup  # captures its CUDA graphs (20 s on a CPU)
    try:
        sync(model.device)
        start = time.perf_counter()
        outs = model.generate_batch(inputs=prompts, generation_config=config, **kwargs)
        sync(model.device)
    except Exception as err:  # noqa: BLE001 - a baseline that fails is reported, not fatal
        return {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
    wall_s = time.perf_counter() - start
    num_out = sum(len(o.generated_tokens) for o in outs.values())
    # its own warm-up runs inside the call: time from the first request's start to the last
    # finish where the outputs carry that (lifespan), else the whole call
    spans = [getattr(o, "lifespan", (-1, -1)) for o in outs.values()]
    busy_s = max(e for _, e in spans) - min(b for b, _ in spans)
    timed_s = busy_s if min(min(span) for span in spans) > 0 and busy_s > 0 else wall_s
    return {
        "throughput_out_tok_s": num_out / timed_s,
        "num_requests": len(prompts),
        "num_out_tokens": num_out,
        "wall_s_incl_warmup": wall_s,
        "throughput_incl_warmup_out_tok_s": num_out / wall_s,
    }


CB_ESTIMATE_S, STATIC_CACHE_ESTIMATE_S = 60, 90  # generate_batch run, static-cache compile


def bench_hf(model, work, vocab_size: int, deadline: float) -> dict:
    """Eager batch-1 decode and static batching always; generate_batch and the compiled static
    cache only when they leave work.hf_reserve_s before the deadline (the run's time budget)."""
    has_time = lambda estimate_s: (  # noqa: E731
        deadline - time.perf_counter() > estimate_s + work.hf_reserve_s
    )
    prompt = prompts_for(vocab_size, work, 1)[0]
    hf_decode(model, prompt, work)  # warm-up
    eager_tok_s, tokens = hf_decode(model, prompt, work)
    result = {
        "decode_tok_s": eager_tok_s,
        "greedy_tokens": tokens,
        "static_batching": hf_static_batching(model, work, vocab_size),
    }
    result["continuous_batching"] = (
        hf_continuous_batching(model, work, vocab_size)
        if has_time(CB_ESTIMATE_S)
        else {"error": "skipped (time budget)"}
    )
    if work.hf_static_cache and not has_time(STATIC_CACHE_ESTIMATE_S):
        result["static_cache_error"] = "skipped (time budget)"
    elif work.hf_static_cache:
        try:
            start = time.perf_counter()
            hf_decode(model, prompt, work, cache_implementation="static")  # compiles
            result["static_cache_compile_s"] = time.perf_counter() - start
            result["static_cache_decode_tok_s"] = hf_decode(
                model, prompt, work, cache_implementation="static"
            )[0]
        except Exception as err:  # noqa: BLE001 - a baseline that fails is reported, not fatal
            result["static_cache_error"] = f"{type(err).__name__}: {str(err)[:200]}"
    return result
