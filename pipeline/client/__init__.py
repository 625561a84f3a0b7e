"""Clients for the served LLM (`ensemble` or `tensorrt_llm_bls`, either backend).

    from pipeline.client import GenerateRequest, GrpcClient, HttpClient
    client = GrpcClient("127.0.0.1:8001")
    for delta in client.stream(GenerateRequest("What is Triton?", max_tokens=32)):
        print(delta, end="", flush=True)

CLI: `python -m pipeline.client --help`.
"""

from pipeline.client.errors import ClientError, ClientTimeout
from pipeline.client.grpc_client import GrpcClient
from pipeline.client.http_client import HttpClient
from pipeline.client.request import GenerateRequest

__all__ = ["ClientError", "ClientTimeout", "GenerateRequest", "GrpcClient", "HttpClient"]
