"""An engine dir as trtllm-build writes it: pipeline.engine_json reads config.json, this checks it.

Layout: docs/trtllm_reference.md, section 4.1.

{"version": tensorrt_llm.__version__, "pretrained_config": {...}, "build_config": {...,
"plugin_config": {...}}} + rank<N>.engine per rank. The C++ runtime reads only this file.
"""

from pathlib import Path

from pipeline.engine_json import EngineJson
from pipeline.errors import ArtifactError

BUILD_KEYS = ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens", "max_beam_width")
PRETRAINED_KEYS = ("architecture", "dtype", "mapping")
FIX = "not a TensorRT-LLM engine dir; re-run `make build BACKEND=trtllm DOCKER=1`"


def read_engine_config(engine_dir: Path) -> EngineJson:
    """config.json checked for what the tensorrtllm backend loads, and the per-rank plans; all
    problems in one ArtifactError."""
    engine_dir = Path(engine_dir)
    config = EngineJson.read(engine_dir, FIX)
    problems = []
    backend = config.backend or "tensorrt_llm"  # trtllm-build writes no backend
    if backend not in ("tensorrt_llm", "trtllm", "tensorrt"):
        problems.append(
            f"backend={backend!r}: this engine was built by another backend; deploy "
            f"it with backend={backend}"
        )
    if not config.version:
        problems.append(
            "no 'version': a pre-0.8 `builder_config` engine or not written by "
            "trtllm-build; rebuild with TensorRT-LLM 1.2"
        )
    problems += [
        f"pretrained_config.{k} missing" for k in PRETRAINED_KEYS if k not in config.pretrained
    ]
    problems += [f"build_config.{k} missing" for k in BUILD_KEYS if k not in config.build]
    if not isinstance(config.build.get("plugin_config"), dict):
        problems.append("build_config.plugin_config missing")
    if problems:
        raise ArtifactError(f"{config.path}: {'; '.join(problems)}")
    missing = [
        f"rank{r}.engine"
        for r in range(config.world_size)
        if not (engine_dir / f"rank{r}.engine").is_file()
    ]
    if missing:
        raise ArtifactError(
            f"{engine_dir}: {', '.join(missing)} missing for world_size="
            f"{config.world_size}; the build did not finish, rebuild the engine"
        )
    return config
