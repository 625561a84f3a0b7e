"""Artifact directories: one per (model, stage, config hash), written atomically, with a manifest.

A stage declares its config subset and inputs; `produce_artifact` decides whether it is up to date,
otherwise runs the stage's producer into a temp dir and swaps it into place. A failing producer
leaves the previous artifact untouched.

Up to date means made from the same inputs and still holding what the manifest says
(`verify_outputs`, for the artifact and its upstream ones); a file changed since is an error.
"""

import json
import logging
import os
import platform
import shutil
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from pipeline import disk_space, temp_dirs
from pipeline.errors import ArtifactError, GateFailed, StageError
from pipeline.manifest import (  # noqa: F401  (stages import these from here)
    MANIFEST,
    Manifest,
    files_sha256,
    files_stat,
    sha256_file,
    sha256_json,
    verify_outputs,
)

log = logging.getLogger(__name__)

KEY_PACKAGES = (
    "torch",
    "transformers",
    "nvidia-modelopt",
    "safetensors",
    "tensorrt_llm",
    "tritonclient",
    "nvidia-pytriton",
    "llm-pipeline",
)


def package_versions(names: Iterable[str] = KEY_PACKAGES) -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def file_stat_fingerprint(paths: Iterable[Path]) -> list[list]:
    """Cheap freshness key for source files: path, size, mtime (sha256 goes in the manifest)."""
    return [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(paths)]


def read_json_object(path: Path, fix: str) -> dict:
    """A JSON file that must hold an object; ArtifactError naming the file and `fix` otherwise."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing; {fix}") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: not valid JSON ({exc}); {fix}") from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{path}: must hold a JSON object; {fix}")
    return data


def input_record(path: Path) -> dict:
    """How a manifest refers to an input: upstream artifacts by digest, files by sha256."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        return {"path": str(path), "artifact": Manifest.read(path).digest}
    if path.is_file():
        return {"path": str(path), "sha256": sha256_file(path)}
    return {"path": str(path)}


@dataclass(frozen=True, slots=True)
class StageRequest:
    """What a stage asks the artifact store for: where, under which config, from which inputs."""

    workdir: Path
    model: str
    stage: str
    config: dict
    # upstream artifact dirs: their manifest digest is the freshness key (no re-hashing)
    upstream: dict[str, Path] = field(default_factory=dict)
    # anything else that should re-trigger the stage when it changes (e.g. source file stats)
    fingerprint_extra: Any = None
    force: bool = False

    @property
    def config_hash(self) -> str:
        # upstream dir names are their own config hashes: other inputs, other directory
        upstream = sorted((k, Path(v).name) for k, v in self.upstream.items())
        return sha256_json([self.config, upstream])[:10]

    @property
    def artifact_dir(self) -> Path:
        return Path(self.workdir) / self.model / f"{self.stage}-{self.config_hash}"

    def fingerprint(self) -> str:
        upstream = {k: Manifest.read(v).digest for k, v in sorted(self.upstream.items())}
        return sha256_json([self.config, upstream, self.fingerprint_extra])


def is_up_to_date(request: StageRequest) -> bool:
    """Made from these inputs, and it and its upstream artifacts still hold what their manifests
    say; ArtifactError (verify_outputs) when one of their files was changed since."""
    target = request.artifact_dir
    if request.force or not (target / MANIFEST).is_file():
        return False
    try:
        manifest = Manifest.read(target)
    except ArtifactError:
        return False
    if manifest.status != "ok" or manifest.fingerprint != request.fingerprint():
        return False
    for upstream_dir in request.upstream.values():
        verify_outputs(upstream_dir)
    verify_outputs(target)
    return True


def produce_artifact(request: StageRequest, producer: Callable[[Path], dict | None]) -> Path:
    """Run `producer(tmp_dir)` unless up to date; swap the result in atomically.

    `producer` writes files into tmp_dir and returns extra manifest fields. A GateFailed raised by
    it keeps the artifact (status=failed) and re-raises; any other exception discards tmp_dir.
    """
    target = request.artifact_dir
    temp_dirs.remove_abandoned(request.workdir)
    if is_up_to_date(request):
        log.info("%s: up to date (%s)", request.stage, target)
        return target
    fingerprint = request.fingerprint()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dirs.temp_path(target, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    log.info("%s: running -> %s", request.stage, target)
    start = time.perf_counter()
    status, extra, gate_error = "ok", {}, None
    try:
        extra = producer(tmp) or {}
    except GateFailed as exc:
        status, gate_error = "failed", exc
        extra = getattr(exc, "extra", {}) or {}
    except BaseException as exc:
        _discard(request, tmp, exc)
        raise
    stats = files_stat(tmp)  # before hashing: a file changed meanwhile gets re-hashed next time
    manifest = Manifest(
        stage=request.stage,
        model=request.model,
        status=status,
        config=request.config,
        inputs={k: input_record(v) for k, v in request.upstream.items()},
        fingerprint=fingerprint,
        outputs=files_sha256(tmp),
        versions=package_versions(),
        wall_time_s=round(time.perf_counter() - start, 3),
        host=socket.gethostname(),
        created_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        extra=extra,
        output_stats=stats,
    )
    try:
        manifest.write(tmp)
    except OSError as exc:
        _discard(request, tmp, exc)
        raise
    _swap_into_place(tmp, target)
    log.info("%s: %s in %.1f s -> %s", request.stage, status, manifest.wall_time_s, target)
    if gate_error is not None:
        raise gate_error
    return target


def _discard(request: StageRequest, tmp: Path, exc: BaseException) -> None:
    """Remove the partial output; a full disk, whichever writer hit it, becomes one StageError."""
    out_of_space = disk_space.is_out_of_space(exc, tmp)
    written = disk_space.file_being_written(exc, tmp) if out_of_space else None
    shutil.rmtree(tmp, ignore_errors=True)
    if out_of_space:
        raise _out_of_space(request, tmp, written) from None


def _out_of_space(request: StageRequest, tmp: Path, written: str | None) -> StageError:
    workdir = Path(request.workdir).resolve()
    free = shutil.disk_usage(workdir).free
    free_text = f"{free / 1e9:.1f} GB" if free >= 1e9 else f"{free / 1e6:.1f} MB"
    if written is not None and Path(written).is_relative_to(tmp):
        written = str(request.artifact_dir / Path(written).relative_to(tmp))
    return StageError(
        f"{request.stage}: no space left on the disk of workdir={workdir} ({free_text} free "
        f"once this stage's partial output was removed) while writing "
        f"{written or 'its output'}; earlier artifacts are intact. Free space there, or set "
        f"workdir= to a directory on a larger disk"
    )


def _swap_into_place(tmp: Path, target: Path) -> None:
    old = temp_dirs.temp_path(target, "old")
    if target.exists():
        os.rename(target, old)
    os.rename(tmp, target)
    shutil.rmtree(old, ignore_errors=True)
