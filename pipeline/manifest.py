"""The manifest of an artifact dir: what it was made from and what it holds, and the check that
it still holds that.

Every output file is recorded with its sha256 and its [size, mtime_ns]. `verify_outputs` compares
every file's size and mtime with the manifest each time an artifact is used or skipped as up to
date, and hashes only the files whose stat changed; a file that differs is an ArtifactError naming
it and the fix, never a silent rebuild.
"""

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import ArtifactError

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"


def sha256_file(
    path: Path, chunk_bytes: int = 1 << 22, on_block: Callable[[int], object] | None = None
) -> str:
    """on_block: told each block's size as it is hashed (a progress bar)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            digest.update(block)
            if on_block is not None:
                on_block(len(block))
    return digest.hexdigest()


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _output_files(root: Path) -> list[Path]:
    return [p for p in sorted(root.rglob("*")) if p.is_file() and p.name != MANIFEST]


def files_sha256(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): sha256_file(p) for p in _output_files(root)}


def _stat_key(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def files_stat(root: Path) -> dict[str, list[int]]:
    """[size, mtime_ns] of every output file: what tells a later check which files to re-hash."""
    return {str(p.relative_to(root)): _stat_key(p) for p in _output_files(root)}


@dataclass(frozen=True, slots=True)
class Manifest:
    stage: str
    model: str
    status: str
    config: dict
    inputs: dict
    fingerprint: str
    outputs: dict
    versions: dict
    wall_time_s: float
    host: str
    created_at: str
    extra: dict = field(default_factory=dict)
    # [size, mtime_ns] per output file; not part of the digest, so a re-stat after a verified
    # copy or touch leaves downstream artifacts up to date (older manifests have none)
    output_stats: dict = field(default_factory=dict)

    @classmethod
    def read(cls, artifact_dir: Path) -> "Manifest":
        path = Path(artifact_dir) / MANIFEST
        if not path.is_file():
            raise ArtifactError(
                f"{path}: no manifest; this directory is not a pipeline artifact "
                f"(re-run the stage that produces it)"
            )
        try:
            return cls(**json.loads(path.read_text()))
        except (json.JSONDecodeError, TypeError) as exc:
            raise ArtifactError(
                f"{path}: unreadable manifest ({exc}); re-run the stage with force=true"
            ) from exc

    def write(self, artifact_dir: Path) -> None:
        data = {f: getattr(self, f) for f in self.__dataclass_fields__}
        path = Path(artifact_dir) / MANIFEST
        tmp = path.with_name(f".{MANIFEST}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
        os.replace(tmp, path)  # a reader never sees half a manifest

    @property
    def digest(self) -> str:
        """Identity of this artifact's content, used as the input fingerprint downstream."""
        return sha256_json([self.stage, self.config, self.fingerprint, self.outputs])


def _stage_command(manifest: Manifest) -> str:
    return manifest.stage.split("-")[0]  # build-torch, deploy-trtllm: the stage, then the backend


def _rebuild_hint(manifest: Manifest) -> str:
    return (
        f"rebuild it with `pipeline {_stage_command(manifest)} force=true` and the overrides "
        f"that made it (force re-runs only the stage asked for)"
    )


def _changed_files(artifact_dir: Path, manifest: Manifest) -> dict[str, list[int]]:
    """Output files whose stat differs from the manifest's (or that it has none of), with their
    stat now; ArtifactError for a missing file or a changed size."""
    changed = {}
    for name in manifest.outputs:
        path = artifact_dir / name
        where = f"{manifest.stage} artifact {artifact_dir}: {name}"
        try:
            now = _stat_key(path) if path.is_file() else None
        except FileNotFoundError:
            now = None
        if now is None:
            raise ArtifactError(
                f"{where}: missing (its manifest lists it); {_rebuild_hint(manifest)}"
            )
        recorded = manifest.output_stats.get(name)
        if recorded is not None and now[0] != recorded[0]:
            raise ArtifactError(
                f"{where}: size {now[0]} bytes, the manifest says {recorded[0]} (truncated, "
                f"extended or replaced since it was made); {_rebuild_hint(manifest)}"
            )
        if now != recorded:
            changed[name] = now
    return changed


def check_sha256(artifact_dir: Path, manifest: Manifest, name: str, digest: str) -> None:
    """ArtifactError naming the file and the fix when digest is not the manifest's."""
    if digest != manifest.outputs[name]:
        raise ArtifactError(
            f"{manifest.stage} artifact {artifact_dir}: {name}: sha256 differs from its "
            f"manifest (corrupted or edited since it was made); {_rebuild_hint(manifest)}"
        )


def verify_outputs(artifact_dir: Path) -> Manifest:
    """Check an artifact's files against its manifest before it is used or skipped as up to date.

    Every file's size and mtime, every time; sha256 only of the files whose stat changed (a copy, a
    touch, a write), whose new stat is then recorded: an unchanged 16 GB engine costs a stat per
    file. A missing file, another size or another sha256 is an ArtifactError naming the file and
    the stage to re-run with force=true.
    """
    artifact_dir = Path(artifact_dir)
    manifest = Manifest.read(artifact_dir)
    if manifest.status != "ok":
        raise ArtifactError(
            f"{artifact_dir}: {manifest.stage} finished with status "
            f"{manifest.status!r}; fix it and re-run `pipeline {_stage_command(manifest)}`"
        )
    changed = _changed_files(artifact_dir, manifest)
    if changed:
        log.info(
            "%s: %d file(s) changed on disk since the manifest (%.1f MB); checking their sha256",
            artifact_dir,
            len(changed),
            sum(size for size, _ in changed.values()) / 1e6,
        )
    for name in changed:
        check_sha256(artifact_dir, manifest, name, sha256_file(artifact_dir / name))
    if changed:
        stats = {**manifest.output_stats, **changed}
        try:
            dataclasses.replace(manifest, output_stats=stats).write(artifact_dir)
        except OSError as exc:  # a read-only artifact: the files are hashed again next time
            log.debug("%s: new file stats not recorded (%s)", artifact_dir, exc)
    return manifest
