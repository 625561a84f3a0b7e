"""backend=trtllm's container command: one tritonserver per MPI rank (trtllm_reference 5.3)."""

import pytest

from pipeline.errors import StageError
from pipeline.server.container import container_argv
from pipeline.server.triton_server import Endpoints

IMAGE = "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"
ENDS = Endpoints("127.0.0.1", 8000, 8001, 8002)


def test_single_rank(tmp_path):
    argv = container_argv(IMAGE, tmp_path / "repo", 1, ENDS, "2g", [tmp_path / "engine"])
    repo = str((tmp_path / "repo").resolve())
    assert argv[:10] == [
        "docker",
        "run",
        "--rm",
        "--gpus",
        "all",
        "--net",
        "host",
        "--shm-size=2g",
        "--ulimit",
        "memlock=-1",
    ]
    assert f"{repo}:{repo}" in argv and f"{tmp_path / 'engine'}:{tmp_path / 'engine'}" in argv
    tail = argv[argv.index(IMAGE) :]
    assert tail[:6] == [IMAGE, "mpirun", "--allow-run-as-root", "-n", "1", "tritonserver"]
    assert f"--model-repository={repo}" in tail and "--disable-auto-complete-config" in tail
    assert "--backend-config=python,shm-region-prefix-name=prefix0_" in tail
    assert "--http-address=127.0.0.1" in tail and "--grpc-port=8001" in tail
    assert ":" not in tail and "--load-model=tensorrt_llm" not in tail


def test_world_size_four_has_one_server_per_rank(tmp_path):
    argv = container_argv(IMAGE, tmp_path, 4, ENDS, "2g", [])
    ranks = " ".join(argv[argv.index("--allow-run-as-root") + 1 :]).split(" : ")
    assert len(ranks) == 4
    for rank, text in enumerate(ranks):
        assert text.startswith("-n 1 tritonserver")
        assert f"shm-region-prefix-name=prefix{rank}_" in text
        assert ("--model-control-mode=explicit --load-model=tensorrt_llm" in text) == (rank > 0)


def test_busy_port_is_refused_with_the_key_to_change():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(StageError, match=f"127.0.0.1:{port} is in use.*deploy.grpc_port"):
            Endpoints("127.0.0.1", 0, port, 0).check_free()
