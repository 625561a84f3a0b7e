"""One OpenAI frontend process for bench_openai_overhead, built as the serve stage builds it
(FrontendRecipe -> build_app -> uvicorn), in front of the Triton at --grpc-url. Run by path with
PYTHONPATH naming the source tree to measure, so the same runner serves this tree and a
--before-tree. --profile FILE writes cProfile stats of the whole process at SIGTERM."""

import argparse
import cProfile
import signal
import sys
import time

import uvicorn

from pipeline.openai_api.app import build_app
from pipeline.openai_api.recipe import FrontendRecipe, uvicorn_config
from pipeline.request.limits import RequestLimits
from pipeline.specs.serve import OpenAISpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--grpc-url", required=True)
    parser.add_argument("--tokenizer-dir", required=True)
    parser.add_argument("--vocab-size", type=int, required=True)
    parser.add_argument("--profile", default="")
    args = parser.parse_args()
    limits = RequestLimits(
        max_input_len=4096,
        max_seq_len=8192,
        max_num_tokens=8192,
        vocab_size=args.vocab_size,
        block_size=32,
        num_kv_blocks=1 << 20,
        enable_chunked_prefill=True,
    )
    spec = OpenAISpec(host="127.0.0.1", port=args.port, max_concurrent_requests=4096)
    recipe = FrontendRecipe(
        spec=spec,
        model_name="bench",
        tokenizer_dir=args.tokenizer_dir,
        limits=limits,
        backend="torch",
        add_special_tokens=False,
        skip_special_tokens=True,
        grpc_url=args.grpc_url,
        engine_metrics_url="http://127.0.0.1:9/metrics",  # no engine metrics: never read here
        api_key="",
    )
    server = uvicorn.Server(uvicorn_config(build_app(recipe.frontend()), spec))
    # CPU time, not wall: on a busy host, preemption would land on whatever ran when it struck
    profile = cProfile.Profile(time.process_time) if args.profile else None

    def stop(*_) -> None:
        server.should_exit = True

    signal.signal(signal.SIGTERM, stop)
    if profile is not None:
        profile.enable()
    server.run()
    if profile is not None:
        profile.disable()
        profile.dump_stats(args.profile)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
