"""The request layer: what a client asks of an engine and what it gets back, with no torch.

The OpenAI frontend, the Triton python models and the engine share these types, so a frontend
worker process checks and shapes requests without loading the engine (torch, transformers,
kernels): a test asserts that importing the frontend's routes loads no torch.
- SamplingParams: per-request generation knobs, each value checked where it is built.
- RequestLimits: what an engine can ever serve (fixed at load), checked by any thread.
- StreamDelta, RequestOutput: per-step deltas and whole-request outputs.
"""

from pipeline.request.limits import RequestLimits
from pipeline.request.outputs import RequestOutput, StreamDelta
from pipeline.request.sampling_params import SamplingParams

__all__ = ["RequestLimits", "RequestOutput", "SamplingParams", "StreamDelta"]
