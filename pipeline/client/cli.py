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

from pipeline.client.endpoints import metrics_url_for
from pipeline.client.errors import ClientError
from pipeline.client.grpc_client import GrpcClient
from pipeline.client.http_client import HttpClient
from pipeline.client.metrics import engines_up, fetch_metrics
from pipeline.client.request import GenerateRequest

DEFAULT_URLS = {"grpc": "127.0.0.1:8001", "http": "http://127.0.0.1:8000"}
# the models that take the ensemble's inputs (text_input, max_tokens, stream, ...), which
# GenerateRequest sends; tensorrt_llm takes token ids under other names
GENERATE_MODELS = ("ensemble", "tensorrt_llm_bls")
DERIVED = (
    "(default: the --metrics-port of the tritonserver at --url when it runs on this host, "
    "else port 8002 of the --url host)"
)


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
    parser.add_argument(
        "--model", default="ensemble", help=f"generate drives {' or '.join(GENERATE_MODELS)}"
    )
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
    ready.add_argument("--metrics-url", help=f"where the engine's readiness is read {DERIVED}")
    infer = commands.add_parser("infer", help="HTTP /infer on a non-decoupled model")
    infer.add_argument("infer_model")
    infer.add_argument("inputs", nargs="+", metavar="NAME=VALUE")
    metrics = commands.add_parser("metrics", help="print Prometheus samples")
    metrics.add_argument("prefix", nargs="?", default="")
    metrics.add_argument("--metrics-url", help=f"where the samples are read {DERIVED}")
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


def _ready(client, url: str, args) -> int:
    """0 once Triton and the engine behind it are ready (polling up to --wait seconds); else 1
    and one line saying which URL failed."""
    metrics_url = args.metrics_url or metrics_url_for(url)
    deadline = time.monotonic() + args.wait
    while (why_not := _not_ready(client, url, args.model, metrics_url)) is not None:
        if time.monotonic() >= deadline:
            waited = f" after {args.wait:.0f} s" if args.wait else ""
            print(f"not ready{waited}: {why_not}", file=sys.stderr)
            return 1
        time.sleep(0.5)
    print(f"ready: {args.model} at {url}")
    return 0


def _not_ready(client, url: str, model: str, metrics_url: str | None) -> str | None:
    """Why the server at url is not ready (Triton's readiness, then the engine's own gauge);
    None when it is. A server with its metrics off is judged by Triton alone."""
    if not client.is_ready():
        return f"{model} at {url} (no server answers there, or it or the model is not ready)"
    if metrics_url is None:
        return None
    try:
        samples = fetch_metrics(metrics_url, timeout_s=5.0)
    except ClientError as exc:
        return (
            f"{model} at {url} is up but its metrics at {metrics_url} cannot be read "
            f"({type(exc.__cause__).__name__}); pass --metrics-url where that server serves them"
        )
    if not engines_up(samples):
        return f"an engine behind {url} is down (pipeline_engine_ready 0 at {metrics_url})"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "generate" and args.model not in GENERATE_MODELS:
        parser.error(
            f"generate drives the models that take the ensemble's inputs "
            f"({', '.join(GENERATE_MODELS)}), not {args.model!r}"
        )
    url = args.url or DEFAULT_URLS[args.protocol]
    kind = GrpcClient if args.protocol == "grpc" else HttpClient
    client = kind(url, model=args.model, timeout_s=args.timeout)
    try:
        if args.command == "generate":
            _generate(client, args)
        elif args.command == "ready":
            return _ready(client, url, args)
        elif args.command == "infer":
            _infer(HttpClient(args.url or DEFAULT_URLS["http"], timeout_s=args.timeout), args)
        else:
            metrics_url = args.metrics_url or metrics_url_for(url)
            if metrics_url is None:
                raise ClientError(f"client: the server at {url} runs with --allow-metrics=false")
            for (name, labels), value in sorted(
                fetch_metrics(metrics_url).items(), key=lambda kv: kv[0][0]
            ):
                if name.startswith(args.prefix):
                    print(name, dict(sorted(labels)), value)
    except ClientError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
