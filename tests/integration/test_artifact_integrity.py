"""A built engine corrupted on disk (8 MB in the middle of its weights, same size) is refused by
deploy and serve with the file and the fix named, and `force=true` on build makes it good again."""

import hashlib
import subprocess
import sys

import pytest

from pipeline.artifacts import Manifest
from pipeline.errors import ArtifactError
from pipeline.server.ports import free_ports
from pipeline.stages import build, deploy
from tests.conftest import REPO, SMOLLM_ENGINE_OVERRIDES, make_spec

pytestmark = pytest.mark.slow

CORRUPT_BYTES = 8 << 20


def _sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


@pytest.fixture
def overrides(tmp_path) -> tuple[str, ...]:
    http, grpc, metrics = free_ports(3)
    return (
        # limits no other test builds: this engine is corrupted, the shared one never is
        *SMOLLM_ENGINE_OVERRIDES,
        "build.max_batch_size=3",
        f"deploy.repo_dir={tmp_path / 'model_repo'}",
        f"deploy.http_port={http}",
        f"deploy.grpc_port={grpc}",
        f"deploy.metrics_port={metrics}",
    )


def test_corrupted_engine_is_refused_until_rebuilt(session_workdir, smollm_ckpt_dir, overrides):
    def spec(stage, *extra):
        return make_spec(stage, *overrides, *extra, workdir=session_workdir)

    engine = build.run(spec("build"))
    deploy.run(spec("deploy"))
    weights = engine / "rank0.safetensors"
    good_sha256, size = Manifest.read(engine).outputs[weights.name], weights.stat().st_size
    with open(weights, "r+b") as f:
        f.seek(size // 2 - CORRUPT_BYTES // 2)
        f.write(bytes(range(256)) * (CORRUPT_BYTES // 256))
    assert weights.stat().st_size == size and _sha256(weights) != good_sha256

    with pytest.raises(ArtifactError) as err:
        deploy.run(spec("deploy"))
    message = str(err.value)
    assert str(engine) in message and "rank0.safetensors: sha256 differs" in message
    assert "`pipeline build force=true`" in message

    served = subprocess.run(
        [sys.executable, "-m", "pipeline", "serve", *overrides, f"workdir={session_workdir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    text = served.stdout + served.stderr
    assert served.returncode == 1 and "Traceback" not in text and "serve: ready" not in text
    assert "rank0.safetensors: sha256 differs" in text and "force=true" in text

    assert build.run(spec("build", "force=true")) == engine
    assert _sha256(weights) == good_sha256 == _sha256(smollm_ckpt_dir / "rank0.safetensors")
    assert Manifest.read(deploy.run(spec("deploy"))).status == "ok"
