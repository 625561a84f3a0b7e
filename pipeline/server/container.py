"""backend=trtllm: the TensorRT-LLM container command, one MPI rank per engine rank.

The image is build.trtllm.container_image, the one the engine was built in (the trtllm backend
refuses engines of another TensorRT-LLM version at deploy). Paths inside the repository (engine,
tokenizer) are absolute host paths; the container mounts each at the same path.
"""

from pathlib import Path

from pipeline.server.triton_server import Endpoints


def docker_gpu_run(shm_size: str, volumes: list[Path], extra: tuple[str, ...] = ()) -> list[str]:
    """`docker run` with all GPUs, host network and the shm/ulimits TensorRT-LLM asks for; each
    volume is mounted at its own absolute path so host paths in manifests stay valid inside."""
    argv = [
        "docker",
        "run",
        "--rm",
        "--gpus",
        "all",
        "--net",
        "host",
        f"--shm-size={shm_size}",
        "--ulimit",
        "memlock=-1",
        "--ulimit",
        "stack=67108864",
        *extra,
    ]
    for volume in volumes:
        argv += ["-v", f"{volume}:{volume}"]
    return argv


def _rank_argv(rank: int, repo_dir: Path, endpoints: Endpoints) -> list[str]:
    argv = [
        "-n",
        "1",
        "tritonserver",
        f"--model-repository={repo_dir}",
        "--disable-auto-complete-config",
        f"--backend-config=python,shm-region-prefix-name=prefix{rank}_",
        *(f"--{kind}-address={endpoints.host}" for kind in ("http", "grpc", "metrics")),
        f"--http-port={endpoints.http_port}",
        f"--grpc-port={endpoints.grpc_port}",
        f"--metrics-port={endpoints.metrics_port}",
    ]
    if rank:  # only rank 0 serves; the others host their engine rank
        argv += ["--model-control-mode=explicit", "--load-model=tensorrt_llm"]
    return argv


def container_argv(
    image: str,
    repo_dir: Path,
    world_size: int,
    endpoints: Endpoints,
    shm_size: str,
    mounts: list[Path],
) -> list[str]:
    """`docker run ... mpirun -n 1 tritonserver ... : -n 1 tritonserver ...` (world_size ranks)."""
    repo_dir = Path(repo_dir).resolve()
    volumes = sorted({str(Path(m).resolve()) for m in (repo_dir, *mounts)})
    argv = docker_gpu_run(shm_size, [Path(v) for v in volumes])
    argv += [image, "mpirun", "--allow-run-as-root"]
    for rank in range(world_size):
        argv += [*([":"] if rank else []), *_rank_argv(rank, repo_dir, endpoints)]
    return argv
