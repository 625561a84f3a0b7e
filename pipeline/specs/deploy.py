from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeploySpec:
    repo_dir: str = "model_repo"
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
