"""serve.verify=full: every file of an artifact hashed again against its manifest, stat or not.

The default check (manifest.verify_outputs) hashes only files whose size or mtime changed; a file
corrupted in place with its mtime put back passes it (the engine's probe catches what changes its
model's output). `full` reads every byte, on several threads at once (hashlib releases the GIL
while it hashes a block), with a progress bar over the bytes.
"""

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

from pipeline.errors import ArtifactError
from pipeline.manifest import Manifest, _rebuild_hint, check_sha256, sha256_file


def rehash_outputs(artifact_dir: Path, num_threads: int = 0) -> Manifest:
    """Hash every file the manifest lists (num_threads at once; 0: one per core, up to 8) and
    compare; ArtifactError naming the first file that differs or is missing, and the fix."""
    artifact_dir = Path(artifact_dir)
    manifest = Manifest.read(artifact_dir)
    names = sorted(manifest.outputs)
    missing = [name for name in names if not (artifact_dir / name).is_file()]
    if missing:
        raise ArtifactError(
            f"{manifest.stage} artifact {artifact_dir}: {missing[0]}: missing (its manifest "
            f"lists it); {_rebuild_hint(manifest)}"
        )
    total = sum((artifact_dir / name).stat().st_size for name in names)
    threads = num_threads or min(8, os.cpu_count() or 1)
    with (
        tqdm(total=total, unit="B", unit_scale=True, desc=f"verify {artifact_dir.name}") as bar,
        ThreadPoolExecutor(threads) as pool,
    ):
        digests = pool.map(
            lambda name: sha256_file(artifact_dir / name, on_block=bar.update), names
        )
        for name, digest in zip(names, digests, strict=True):
            check_sha256(artifact_dir, manifest, name, digest)
    return manifest
