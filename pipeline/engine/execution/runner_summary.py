"""The model runner's start-up line: device, KV cache, kernels, graphs, steps a launch, ranks."""

from typing import TYPE_CHECKING

from pipeline.engine import kernels
from pipeline.engine.engine_config import EngineConfig
from pipeline.engine.layers.linear import kernel_counts

if TYPE_CHECKING:
    from pipeline.engine.execution.model_runner import ModelRunner


def runner_summary(runner: "ModelRunner", config: EngineConfig) -> str:
    graphs, mapping, layers = runner.graphs, runner.mapping, config.model.num_layers
    triton = kernels.is_available(runner.device) and config.triton_kernels and not config.compile
    text = (
        f"model runner: {runner.device} {runner.dtype}, {runner.num_kv_blocks} KV blocks x "
        f"{runner.block_size} tokens ({runner.kv_dtype}, {runner.kv_cache.nbytes / 2**30:.2f} "
        f"GiB), linears {kernel_counts(runner.model)}, Triton kernels {'on' if triton else 'off'}"
        f", CUDA graphs: decode {graphs.batch_sizes if graphs else 'off'}, mixed "
        f"{graphs.token_counts if graphs and graphs.token_counts else 'off'}, torch.compile "
        f"{'on' if graphs and config.compile else 'off'}, {runner.num_scheduler_steps} step(s) "
        f"a launch (up to {runner.max_scheduler_steps})"
    )
    if runner.ranks is None:
        return text
    own = list(mapping.layers(layers))
    return (
        f"{text}, rank {mapping.rank} of tp_size={mapping.tp_size} pp_size={mapping.pp_size} "
        f"(layers {own[0]}-{own[-1]}, all-reduce: {runner.ranks.all_reduce})"
    )
