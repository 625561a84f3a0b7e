"""The portable torch engine: paged KV cache, in-flight batching, CPU and CUDA.

Who owns which state (each piece has one owner; others only read it):
- LLMEngine: the tokenizer, the unfinished requests by id, step counters.
- Scheduler: the waiting and running queues, preemption count; owns the BlockManager.
- BlockManager: the free-block list and the block-table array (a row per Sequence holding
  blocks); the ModelRunner reads the array.
- ModelRunner: every device tensor (weights, KV cache, sampling RNG) and, through
  CudaGraphRunner, the CUDA graphs and their static buffers; creates a request's seeded generator.
- Sequence: one request's tokens, progress (num_computed_tokens), status and timings.
- AsyncLLMEngine: the inbox and the per-request handles; its thread alone drives the LLMEngine.
Layers and kernels (layers/, kernels/, quant/) hold only weights; the KV cache comes in as an
argument, with the step's BatchMetadata (no global forward context).

    engine = LLMEngine.from_engine_dir(path, device="auto", max_batch_size=..., ...)
    outputs = engine.generate(prompts, SamplingParams(max_tokens=32))
"""

from pipeline.engine.async_engine import AsyncLLMEngine, RequestHandle
from pipeline.engine.llm_engine import LLMEngine
from pipeline.request.outputs import RequestOutput, StreamDelta
from pipeline.request.sampling_params import SamplingParams

__all__ = [
    "AsyncLLMEngine",
    "LLMEngine",
    "RequestHandle",
    "RequestOutput",
    "SamplingParams",
    "StreamDelta",
]
