"""An engine dir's config.json, read here only.

Both backends write TensorRT-LLM's engine layout (docs/trtllm_reference.md, section 4.1):
{"version", "pretrained_config", "build_config": {..., "plugin_config"}}; the torch backend adds
"backend": "torch" and build_config.torch. The torch engine, the trtllm backend, deploy, serve,
the OpenAI frontend, the bench and the tuner each take what they need from one EngineJson.
Reading it needs neither torch nor TensorRT-LLM.
"""

from dataclasses import dataclass
from pathlib import Path

from pipeline.artifacts import read_json_object
from pipeline.errors import ArtifactError

FILE_NAME = "config.json"
REBUILD = "re-run `make build` (python -m pipeline build force=true)"


@dataclass(frozen=True, slots=True)
class EngineJson:
    path: Path  # <engine dir>/config.json
    version: str  # the builder's version; "" when absent
    backend: str  # "torch" for ours; "" when absent (trtllm-build writes none)
    pretrained: dict  # pretrained_config: the model (architecture, dtype, mapping, sizes)
    build: dict  # build_config: the engine's limits and plugin_config

    @classmethod
    def read(cls, engine_dir: Path, fix: str = REBUILD) -> "EngineJson":
        """The file, which must hold the two config objects (ArtifactError naming it and `fix`)."""
        path = Path(engine_dir) / FILE_NAME
        data = read_json_object(path, fix)
        problems = [
            f"no {key!r} object"
            for key in ("pretrained_config", "build_config")
            if not isinstance(data.get(key), dict)
        ]
        if problems:
            raise ArtifactError(f"{path}: {'; '.join(problems)}; {fix}")
        version, backend = data.get("version"), data.get("backend")
        return cls(
            path=path,
            version=version if isinstance(version, str) else "",
            backend=backend if isinstance(backend, str) else "",
            pretrained=data["pretrained_config"],
            build=data["build_config"],
        )

    @property
    def engine_dir(self) -> Path:
        return self.path.parent

    @property
    def plugin(self) -> dict:
        return self.build.get("plugin_config") or {}

    @property
    def mapping(self) -> dict:
        return self.pretrained.get("mapping") or {}

    @property
    def tp_size(self) -> int:
        return int(self.mapping.get("tp_size", 1))

    @property
    def pp_size(self) -> int:
        return int(self.mapping.get("pp_size", 1))

    @property
    def world_size(self) -> int:
        return int(self.mapping.get("world_size", self.tp_size * self.pp_size))

    @property
    def is_paged_kv_cache(self) -> bool:
        kind = self.build.get("kv_cache_type")
        if kind is None:  # TensorRT-LLM versions before kv_cache_type kept a plugin flag
            return bool(self.plugin.get("paged_kv_cache"))
        return str(kind).lower() == "paged"

    def is_plugin_enabled(self, key: str) -> bool:
        """plugin_config flags: plugins are a dtype string or null, features true or false."""
        return self.plugin.get(key) not in (None, False, "disable")
