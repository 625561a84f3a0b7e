"""deploy: engine dir -> a validated five-model Triton repository, published to deploy.repo_dir.

The repository is written and validated inside the deploy artifact
(`${workdir}/<model>/deploy-<backend>-<hash>/repository`, with its manifest); only a valid one is
copied to deploy.repo_dir (default model_repo/), swapped in with a rename. A bad deploy config
raises before anything is published and leaves the previous repository as it was.
"""

import hashlib
from dataclasses import asdict
from pathlib import Path

from pipeline.artifacts import Manifest, StageRequest, produce_artifact, verify_outputs
from pipeline.backends import load_backend
from pipeline.lora.deployed import check_adapters, copy_adapters, write_trtllm_tensors
from pipeline.lora.fetch import fetch_adapters
from pipeline.specs.pipeline import PipelineSpec
from pipeline.stages import build, forced
from pipeline.triton_repo import repo_writer

# DeploySpec fields that concern the server, not the repository (no re-deploy when they change)
SERVER_KEYS = (
    "repo_dir",
    "host",
    "http_port",
    "grpc_port",
    "metrics_port",
    "startup_timeout_s",
    "server_args",
    "stub_python",
)
REPOSITORY = "repository"


def _sources_digest() -> str:
    """The python model sources are part of the repository: edits re-trigger deploy."""
    digest = hashlib.sha256()
    for path in sorted(repo_writer.SOURCES.glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def served_facts(artifact: Path) -> dict:
    """A deploy artifact's facts (backend, engine and tokenizer dirs) for a server, once the engine
    it loads is checked against its manifest: a changed engine is refused, never served."""
    facts = Manifest.read(artifact).extra
    verify_outputs(Path(facts["engine_dir"]))
    return facts


def run(spec: PipelineSpec) -> Path:
    backend = load_backend(spec)
    engine_dir = build.run(spec)
    tokenizer_dir = Path(Manifest.read(engine_dir).extra["tokenizer_dir"]).resolve()
    repo_config = {k: v for k, v in asdict(spec.deploy).items() if k not in SERVER_KEYS}
    adapters = fetch_adapters(spec.lora, Path(spec.workdir), spec.model.name)
    request = StageRequest(
        workdir=Path(spec.workdir),
        model=spec.model.name,
        stage=f"deploy-{backend.name}",
        config={
            "deploy": repo_config,
            "backend": asdict(spec.backend),
            "container_image": spec.build.trtllm.container_image,
            "lora": asdict(spec.lora),
        },
        upstream={"engine": engine_dir, **{f"lora-{n}": p for n, p in adapters.items()}},
        fingerprint_extra=_sources_digest(),
        force=forced(spec, "deploy"),
    )

    def produce(out_dir: Path) -> dict:
        verify_outputs(engine_dir)
        check_adapters(adapters, engine_dir, spec.lora)
        facts = repo_writer.write_repository(
            backend, engine_dir, tokenizer_dir, out_dir / REPOSITORY, spec.deploy
        )
        copy_adapters(adapters, out_dir / REPOSITORY / "tensorrt_llm")
        if backend.name == "trtllm":  # what a client sends with an adapter's first request
            write_trtllm_tensors(
                adapters, engine_dir, spec.lora, out_dir / REPOSITORY / "tensorrt_llm"
            )
        return {
            "backend": backend.name,
            "engine_dir": str(Path(engine_dir).resolve()),
            "tokenizer_dir": str(tokenizer_dir),
            "repository": REPOSITORY,
            "lora": sorted(adapters),  # deployed adapters (the server reads its dir for more)
            **facts,
        }

    artifact = produce_artifact(request, produce)
    marker = {"artifact": str(artifact.resolve()), "digest": Manifest.read(artifact).digest}
    repo_dir = Path(spec.deploy.repo_dir)
    if repo_writer.published_marker(repo_dir) != marker:
        repo_writer.publish(artifact / REPOSITORY, repo_dir, marker)
    return artifact
