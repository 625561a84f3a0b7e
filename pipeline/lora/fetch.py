"""lora.adapters -> one artifact per adapter (its two files and a manifest of their sha256), as
the fetch stage makes the model's: a local PEFT dir, or a hub id pinned to a revision.

    name: /path/to/peft_dir          name: org/adapter@<commit sha>
"""

import shutil
from pathlib import Path

from pipeline.artifacts import StageRequest, file_stat_fingerprint, produce_artifact
from pipeline.errors import ArtifactError, ConfigError
from pipeline.lora.adapters import CONFIG_FILE, WEIGHTS_FILE, check_name, read_adapter
from pipeline.specs.lora import LoraSpec

FILES = (CONFIG_FILE, WEIGHTS_FILE)


def _hub(source: str, name: str) -> tuple[str, str] | None:
    """(repo id, revision) of a hub source; None for a local path."""
    if Path(source).expanduser().exists() or source.startswith((".", "/", "~")):
        return None
    repo, _, revision = source.partition("@")
    if repo.count("/") != 1 or not revision:
        raise ConfigError(
            f"lora.adapters.{name}={source}: no such directory, and not a hub id pinned to a "
            f"revision (org/name@<commit sha>); fix the source"
        )
    return repo, revision


def _download(repo: str, revision: str, name: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo, revision=revision, allow_patterns=list(FILES)))
    except (LocalEntryNotFoundError, HfHubHTTPError) as exc:
        raise ArtifactError(
            f"lora.adapters.{name}: {repo}@{revision}: not in the local HF cache and the hub "
            f"did not serve it ({exc}); download it on a connected machine or use a local dir"
        ) from exc


def fetch_adapter(name: str, source: str, spec: LoraSpec, workdir: Path, model: str) -> Path:
    """The adapter's artifact dir (adapter_config.json + adapter_model.safetensors), up to date."""
    check_name(name, f"lora.adapters.{name}")
    hub = _hub(source, name)
    local = None if hub else Path(source).expanduser().resolve()
    request = StageRequest(
        workdir=workdir,
        model=model,
        stage=f"lora-{name}",
        config={"source": source},
        fingerprint_extra=file_stat_fingerprint([local / f for f in FILES]) if local else None,
    )

    def produce(out_dir: Path) -> dict:
        src = _download(*hub, name) if hub else local
        read_adapter(src, name, spec.max_rank)  # its config, before anything is copied
        for file in FILES:
            shutil.copy2(src / file, out_dir / file)
        return {"source": source}

    return produce_artifact(request, produce)


def fetch_adapters(spec: LoraSpec, workdir: Path, model: str) -> dict[str, Path]:
    """name -> artifact dir of every lora.adapters entry."""
    return {
        name: fetch_adapter(name, source, spec, Path(workdir), model)
        for name, source in sorted(spec.adapters.items())
    }
