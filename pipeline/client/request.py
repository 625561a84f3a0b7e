"""One generation request in the tensorrtllm ensemble's terms; None = not sent (server default)."""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    text: str
    max_tokens: int = 64
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop_words: tuple[str, ...] = ()
    bad_words: tuple[str, ...] = ()
    end_id: int | None = None
    pad_id: int | None = None
    exclude_input_in_output: bool | None = None

    def values(self, stream: bool) -> dict:
        """Ensemble input name -> value, leaving out what is unset."""
        values = {
            "text_input": self.text,
            "max_tokens": self.max_tokens,
            "stream": stream,
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "seed": self.seed,
            "end_id": self.end_id,
            "pad_id": self.pad_id,
            "exclude_input_in_output": self.exclude_input_in_output,
            "stop_words": list(self.stop_words) or None,
            "bad_words": list(self.bad_words) or None,
        }
        return {k: v for k, v in values.items() if v is not None}

    def arrays(self, stream: bool) -> dict[str, np.ndarray]:
        """The same as batch-1 tensors: [1, 1] scalars, [1, n] word lists."""
        dtypes = {
            "text_input": np.object_,
            "max_tokens": np.int32,
            "stream": np.bool_,
            "temperature": np.float32,
            "top_k": np.int32,
            "top_p": np.float32,
            "seed": np.uint64,
            "end_id": np.int32,
            "pad_id": np.int32,
            "exclude_input_in_output": np.bool_,
            "stop_words": np.object_,
            "bad_words": np.object_,
        }
        arrays = {}
        for name, value in self.values(stream).items():
            items = value if isinstance(value, list) else [value]
            if dtypes[name] is np.object_:
                items = [str(v).encode() for v in items]
            arrays[name] = np.array([items], dtype=dtypes[name])
        return arrays
