"""An engine dir's config.json as trtllm-build writes it: read and validate.

Layout: docs/trtllm_reference.md, section 4.1.

{"version": tensorrt_llm.__version__, "pretrained_config": {...}, "build_config": {...,
"plugin_config": {...}}} + rank<N>.engine per rank. The C++ runtime reads only this file.
"""

from dataclasses import dataclass
from pathlib import Path

from pipeline.artifacts import read_json_object
from pipeline.errors import ArtifactError

BUILD_KEYS = ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens", "max_beam_width")
PRETRAINED_KEYS = ("architecture", "dtype", "mapping")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    engine_dir: Path
    version: str
    pretrained: dict
    build: dict

    @property
    def plugin(self) -> dict:
        return self.build["plugin_config"]

    @property
    def world_size(self) -> int:
        mapping = self.pretrained["mapping"]
        return int(mapping.get("world_size", mapping.get("tp_size", 1) * mapping.get("pp_size", 1)))

    @property
    def is_paged_kv_cache(self) -> bool:
        kind = self.build.get("kv_cache_type")
        if kind is None:  # versions before kv_cache_type kept a plugin flag
            return bool(self.plugin.get("paged_kv_cache"))
        return str(kind).lower() == "paged"

    def is_enabled(self, plugin_key: str) -> bool:
        """Plugin flags are a dtype string / null, features true / false."""
        return self.plugin.get(plugin_key) not in (None, False, "disable")


def _load(path: Path) -> dict:
    return read_json_object(
        path, "not a TensorRT-LLM engine dir; re-run `make build BACKEND=trtllm DOCKER=1`"
    )


def read_engine_config(engine_dir: Path) -> EngineConfig:
    """Parse and check config.json and the per-rank plans; all problems in one ArtifactError."""
    engine_dir = Path(engine_dir)
    path = engine_dir / "config.json"
    data = _load(path)
    problems = []
    backend = data.get("backend", "tensorrt_llm")
    if backend not in ("tensorrt_llm", "trtllm", "tensorrt"):
        problems.append(
            f"backend={backend!r}: this engine was built by another backend; deploy "
            f"it with backend={backend}"
        )
    if not isinstance(data.get("version"), str):
        problems.append(
            "no 'version': a pre-0.8 `builder_config` engine or not written by "
            "trtllm-build; rebuild with TensorRT-LLM 1.2"
        )
    pretrained, build = data.get("pretrained_config"), data.get("build_config")
    if not isinstance(pretrained, dict):
        problems.append("no 'pretrained_config' object")
        pretrained = {}
    if not isinstance(build, dict):
        problems.append("no 'build_config' object")
        build = {}
    problems += [f"pretrained_config.{k} missing" for k in PRETRAINED_KEYS if k not in pretrained]
    problems += [f"build_config.{k} missing" for k in BUILD_KEYS if k not in build]
    if not isinstance(build.get("plugin_config"), dict):
        problems.append("build_config.plugin_config missing")
    if problems:
        raise ArtifactError(f"{path}: {'; '.join(problems)}")
    config = EngineConfig(engine_dir, data["version"], pretrained, build)
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
