"""`python -m pipeline.client`: talk to the served model from a shell.

python -m pipeline.client generate "What is Triton?" --stream
python -m pipeline.client --protocol http generate "Hi" --max-tokens 16
python -m pipeline.client ready --wait 60
python -m pipeline.client infer preprocessing QUERY="Hello" REQUEST_OUTPUT_LEN=4
python -m pipeline.client metrics pipeline_engine
"""

import argparse
import sys
import time

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from pipeline.client.errors import ClientError, wait_until_ready
from pipeline.client.grpc_client import GrpcClient
from pipeline.client.http_client import HttpClient
from pipeline.client.metrics import engines_ready, fetch_metrics
from pipeline.client.request import GenerateRequest

DEFAULT_URLS = {"grpc": "127.0.0.1:8001", "http": "http://127.0.0.1:8000"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.client",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument(
        "--url",
        help="server address (default 127.0.0.1:8001 for grpc, http://127.0.0.1:8000 for http)",
    )
    parser.add_argument("--model", default="ensemble", help="ensemble or tensorrt_llm_bls")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per response")
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="send a prompt, print the answer")
    gen.add_argument("prompt")
    gen.add_argument("--stream", action="store_true", help="print tokens as they arrive")
    gen.add_argument("--max-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float)
    gen.add_argument("--top-k", type=int)
    gen.add_argument("--top-p", type=float)
    gen.add_argument("--seed", type=int)
    gen.add_argument("--stop-word", action="append", default=[])
    gen.add_argument("--bad-word", action="append", default=[])
    ready = commands.add_parser("ready", help="exit 0 when the server and model are ready")
    ready.add_argument("--wait", type=float, default=0.0, help="seconds to keep polling")
    ready.add_argument(
        "--metrics-url",
        default="http://127.0.0.1:8002/metrics",
        help="where the torch engine's pipeline_engine_ready gauge is read",
    )
    infer = commands.add_parser("infer", help="HTTP /infer on a non-decoupled model")
    infer.add_argument("infer_model")
    infer.add_argument("inputs", nargs="+", metavar="NAME=VALUE")
    metrics = commands.add_parser("metrics", help="print Prometheus samples")
    metrics.add_argument("prefix", nargs="?", default="")
    metrics.add_argument("--metrics-url", default="http://127.0.0.1:8002/metrics")
    return parser


def _generate(client, args) -> None:
    request = GenerateRequest(
        args.prompt,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        stop_words=tuple(args.stop_word),
        bad_words=tuple(args.bad_word),
    )
    start = time.perf_counter()
    if not args.stream:
        print(client.generate(request))
        return
    num_chunks = 0
    for delta in client.stream(request):
        num_chunks += 1
        print(delta, end="", flush=True)
    print()
    print(f"[{num_chunks} chunks in {time.perf_counter() - start:.2f} s]", file=sys.stderr)


def _infer(client: HttpClient, args) -> None:
    metadata = {t["name"]: t for t in client.model_metadata(args.infer_model)["inputs"]}
    arrays = {}
    for item in args.inputs:
        name, _, value = item.partition("=")
        if name not in metadata:
            raise ClientError(
                f"client: {args.infer_model} has no input {name!r} (inputs: {', '.join(metadata)})"
            )
        dtype = triton_to_np_dtype(metadata[name]["datatype"])
        arrays[name] = np.array([[value.encode() if dtype == np.object_ else value]], dtype=dtype)
    for name, array in client.infer(args.infer_model, arrays).items():
        print(f"{name}: {array.tolist()}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    url = args.url or DEFAULT_URLS[args.protocol]
    kind = GrpcClient if args.protocol == "grpc" else HttpClient
    client = kind(url, model=args.model, timeout_s=args.timeout)
    try:
        if args.command == "generate":
            _generate(client, args)
        elif args.command == "ready":

            def is_ready() -> bool:  # Triton's readiness, then the engine's own
                return client.is_ready() and engines_ready(args.metrics_url)

            if args.wait:
                wait_until_ready(is_ready, args.model, url, args.wait)
            if not is_ready():
                print(f"not ready: {args.model} at {url}", file=sys.stderr)
                return 1
            print(f"ready: {args.model} at {url}")
        elif args.command == "infer":
            _infer(HttpClient(args.url or DEFAULT_URLS["http"], timeout_s=args.timeout), args)
        else:
            for (name, labels), value in sorted(
                fetch_metrics(args.metrics_url).items(), key=lambda kv: kv[0][0]
            ):
                if name.startswith(args.prefix):
                    print(name, dict(sorted(labels)), value)
    except ClientError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
