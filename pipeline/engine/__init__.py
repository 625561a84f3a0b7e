"""The portable torch engine: paged KV cache, in-flight batching, CPU and CUDA.

A step (LLMEngine.step) is schedule -> launch -> update:
    batch = scheduler.schedule()                   # SchedulerOutput: what runs, read-only
    plan = launch_policy.plan(batch)               # LaunchPlan: steps, reserve
    sampled = model_runner.launch(batch, plan)     # SampledTokens, on their way to the host
    scheduler.update_from_launch(batch, sampled)   # progress, pending tokens
    ... (overlap scheduling: the next step() reads them)
    scheduler.update_from_output(sampled, tokens)  # append, finish, free blocks

Who owns which state (each piece has one owner; others only read it):
- LLMEngine: the tokenizer, the unfinished requests by id, step counters, failure isolation,
  the deltas it returns.
- Scheduler: the waiting and running queues, preemption count, suspects; owns the BlockManager;
  the only one that updates a Sequence after it was scheduled.
- BlockManager: the free-block list and the block-table array (a row per Sequence holding
  blocks); a SchedulerOutput carries the scheduled rows of it.
- LaunchPolicy: the pacer (steps a launch, the late-scheduling reserve) and the launch timer,
  in one module (core/launch_policy.py).
- ModelRunner: every device tensor (weights, KV cache, sampling RNG) and, through
  CudaGraphRunner, the CUDA graphs and their static buffers. It packs a SchedulerOutput into
  one int64 buffer (step_inputs.py, with step_types.py's StepHeader and StepParts; a pipeline
  micro-batch's rows, a verify step's logits rows), which is also what travels to the other
  ranks, and builds what the requests ask of the logits (request_logits.py: the sampler's
  inputs, with a request's seeded generator and penalty counts, and the log probabilities sent
  back).
- Sequence: one request's tokens, progress (num_computed_tokens), status and timings.
- AsyncLLMEngine: the inbox and the per-request handles; its thread alone drives the LLMEngine.
Layers and kernels (layers/, kernels/, quant/) hold only weights; the KV cache comes in as an
argument, with the step's BatchMetadata (no global forward context).

Rooms, each importing only those below it (a test holds the order):
- core/: the loop (LLMEngine, AsyncLLMEngine), its process (engine_process), the launch policy,
  the start-up probe;
- execution/: the ModelRunner and what runs a launch: packing (step_inputs), the requests'
  side of the logits (request_logits), CUDA graphs, micro-batches, the other ranks' channel and
  worker entry point, weights loading;
- engine_config.py: an engine dir's config.json and the runtime knobs, checked (speculative
  decoding's in spec_config.py);
- spec/: speculative decoding: the proposers (prompt lookup, a draft model's runner) and the
  engine's side of it (which requests draft, acceptance counts, adaptive draft counts);
- models/ -> layers/ -> quant/ -> kernels/: the model, its layers, quantized linears, kernels;
- parallel/: the rank mapping, collectives, pipeline links, worker processes;
- scheduling/: the scheduler, block manager, sequences and the contract types the runner
  reads and returns (SchedulerOutput, LaunchPlan, SampledTokens).

    engine = LLMEngine.from_engine_dir(path, device="auto", max_batch_size=..., ...)
    outputs = engine.generate(prompts, SamplingParams(max_tokens=32))
"""

import importlib
from typing import TYPE_CHECKING

from pipeline.request.outputs import RequestOutput, StreamDelta
from pipeline.request.sampling_params import SamplingParams

if TYPE_CHECKING:
    from pipeline.engine.core.async_engine import AsyncLLMEngine, RequestHandle
    from pipeline.engine.core.llm_engine import LLMEngine

# loaded on first use: a module of the package that needs no torch (the engine process's client
# in a Triton stub, engine_process.EngineProcess) is imported without the engine's
_LAZY = {
    "AsyncLLMEngine": "pipeline.engine.core.async_engine",
    "RequestHandle": "pipeline.engine.core.async_engine",
    "LLMEngine": "pipeline.engine.core.llm_engine",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AsyncLLMEngine",
    "LLMEngine",
    "RequestHandle",
    "RequestOutput",
    "SamplingParams",
    "StreamDelta",
]
