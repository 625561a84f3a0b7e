"""What the engine reports (stats()): its counters, limits and settings."""

from typing import TYPE_CHECKING

from pipeline.engine.scheduling.prefix_cache import prefix_cache_stats
from pipeline.engine.spec.speculator import speculation_stats

if TYPE_CHECKING:
    from pipeline.engine.core.llm_engine import LLMEngine


def engine_stats(engine: "LLMEngine") -> dict:
    runner, blocks = engine.model_runner, engine.scheduler.block_manager
    stats = {
        "num_total_blocks": blocks.num_total_blocks,
        "num_free_blocks": blocks.num_free_blocks,
        "block_size": blocks.block_size,
        "num_running": len(engine.scheduler.running),
        "num_waiting": len(engine.scheduler.waiting),
        "num_preemptions": engine.scheduler.num_preemptions,
        "num_steps": engine._num_steps,
        "num_prompt_steps": engine._num_prompt_steps,
        "num_scheduled_seqs": engine._num_scheduled_seqs,
        "num_scheduled_tokens": engine._num_scheduled_tokens,
        "num_generated_tokens": engine._num_generated_tokens,
        "num_finished_requests": engine._num_finished,
        "request_queue_s": engine._queue_s,
        "request_first_token_s": engine._first_token_s,
        "request_final_s": engine._final_s,
        "max_batch_size": engine.max_batch_size,
        "max_num_tokens": engine.max_num_tokens,
        "scheduler_policy": engine.scheduler_policy,
        "overlap_scheduling": engine.overlap_scheduling,
        "device": str(runner.device),
        "dtype": str(runner.dtype).removeprefix("torch."),
        "kv_cache_dtype": str(runner.kv_dtype).removeprefix("torch."),
        "cuda_graph_batch_sizes": runner.graphs.batch_sizes if runner.graphs else [],
        "cuda_graph_token_counts": runner.graphs.token_counts if runner.graphs else [],
        **speculation_stats(engine.speculator),
    } | engine.launch_policy.stats()
    return stats | prefix_cache_stats(blocks)
