"""The deployed SmolLM2 repository in the real tritonserver, through every client path.

One server for the module (torch backend, CPU, one engine thread; two instances of the LLM model
share its engine process), its python models run in a stub env (pipeline.server.stub_env) as a
numpy-2 install would; the engine loaded in-process gives the expected greedy text. The last test
stops the server and checks nothing is left.
"""

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import psutil
import pytest
import requests

from pipeline.client import ClientError, GenerateRequest, GrpcClient, HttpClient, cli
from pipeline.client.endpoints import metrics_url_for
from pipeline.client.metrics import fetch_metrics, metric_value
from pipeline.engine import LLMEngine, SamplingParams
from pipeline.server import launch, stub_env
from pipeline.server.ports import free_ports
from pipeline.server.triton_server import SHM_DIR
from pipeline.stages import deploy
from pipeline.triton_models.hop_log import HOPS
from tests.conftest import SMOLLM_ENGINE_OVERRIDES, make_spec

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPTS = [
    "The capital of France is",
    "Water boils at",
    "The first president of the USA was",
    "Python is a programming language that",
    "The largest planet in our solar system is",
    "A haiku about the sea:",
    "To make tea, first",
    "The opposite of hot is",
]
# greedy SmolLM2 continues these in scripts whose characters span several tokens
MULTIBYTE_PROMPTS = ["日本の首都は", "中文：你好，世界。我喜欢", "Emoji story: 🙂🙂"]
MAX_TOKENS = 16
BURST_TOKENS = 8
NUM_BURST_REQUESTS = 64


@pytest.fixture(scope="module")
def stub_python3(tmp_path_factory):
    return stub_env.create(tmp_path_factory.mktemp("stub") / "env", hide=("gensim",))


@pytest.fixture(scope="module")
def served_spec(session_workdir, smollm_engine_dir, stub_python3):
    http, grpc, metrics = free_ports(3)
    return make_spec(
        "serve",
        *SMOLLM_ENGINE_OVERRIDES,
        f"deploy.repo_dir={session_workdir / 'serve_model_repo'}",
        f"deploy.http_port={http}",
        f"deploy.grpc_port={grpc}",
        f"deploy.metrics_port={metrics}",
        "deploy.torch.num_threads=1",
        "deploy.torch.instances=2",  # two stubs share the engine process
        "deploy.torch.num_scheduler_steps=2",  # each launch decodes one step further
        f"deploy.stub_python={stub_python3}",
        workdir=session_workdir,
    )


@pytest.fixture(scope="module")
def server(served_spec):
    deploy.run(served_spec)
    with launch.local_server(served_spec.deploy, served_spec.workdir) as server:
        yield server


@pytest.fixture(scope="module")
def engine(smollm_engine_dir):
    return LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu")


def direct(engine, max_tokens: int) -> dict[str, tuple[str, int]]:
    """prompt -> (text, number of generated tokens), greedy, straight from the engine."""
    outputs = engine.generate(PROMPTS, SamplingParams(max_tokens=max_tokens))
    return {p: (o.text, len(o.token_ids)) for p, o in zip(PROMPTS, outputs, strict=True)}


@pytest.fixture(scope="module")
def expected(engine):
    return direct(engine, MAX_TOKENS)


@pytest.fixture(scope="module")
def grpc(server):
    return GrpcClient(server.endpoints.grpc_url, timeout_s=120)


@pytest.fixture(scope="module")
def http(server):
    return HttpClient(server.endpoints.http_url, timeout_s=120)


def test_grpc_unary_equals_the_engine(grpc, expected):
    for prompt in PROMPTS[:2]:
        assert grpc.generate(GenerateRequest(prompt, max_tokens=MAX_TOKENS)) == expected[prompt][0]


def counted_stream(client: GrpcClient, prompt: str) -> list:
    arrays = GenerateRequest(prompt, max_tokens=MAX_TOKENS).arrays(stream=True)
    return list(client.responses(arrays, count_tokens=True))


def test_grpc_stream_sends_tokens_as_made_with_their_count_then_final(grpc, expected):
    prompt = PROMPTS[2]
    responses = counted_stream(grpc, prompt)
    text, num_tokens = expected[prompt]
    assert [r.is_final for r in responses] == [False] * (len(responses) - 1) + [True]
    # one response per token, unless the server coalesced a stream that fell behind
    assert 1 < len([r for r in responses if r.text]) <= num_tokens
    assert sum(r.num_tokens for r in responses) == num_tokens
    assert "".join(r.text or "" for r in responses) == text


def test_a_thread_keeps_its_stream_and_an_abandoned_request_spares_the_next(server, expected):
    client = GrpcClient(server.endpoints.grpc_url, timeout_s=120, keep_streams=True)
    prompt = PROMPTS[1]
    request = GenerateRequest(prompt, max_tokens=MAX_TOKENS)
    assert client.generate(request) == expected[prompt][0]
    stream = client._local.stream
    assert "".join(client.stream(request)) == expected[prompt][0]
    assert client._local.stream is stream  # one stream served both requests
    abandoned = client.responses(request.arrays(stream=True))
    next(abandoned)
    abandoned.close()  # cancels it by closing its stream
    assert client._local.stream is None
    assert client.generate(request) == expected[prompt][0]
    client.close()
    assert client._local.stream.is_closed


def test_http_generate_and_generate_stream(http, expected):
    prompt = PROMPTS[3]
    assert http.generate(GenerateRequest(prompt, max_tokens=MAX_TOKENS)) == expected[prompt][0]
    deltas = list(http.stream(GenerateRequest(prompt, max_tokens=MAX_TOKENS)))
    assert 1 < len([d for d in deltas if d]) <= expected[prompt][1]
    assert "".join(deltas) == expected[prompt][0]


def test_streamed_split_characters_come_whole_without_postprocessing(server, grpc, engine):
    """The LLM model detokenizes each stream (the ensemble runs no postprocessing): a character
    whose bytes span tokens comes whole, and the pieces join to the non-streamed text."""
    outputs = engine.generate(MULTIBYTE_PROMPTS, SamplingParams(max_tokens=MAX_TOKENS))
    bls = GrpcClient(server.endpoints.grpc_url, model="tensorrt_llm_bls", timeout_s=120)
    before = postprocessing_requests(server)
    for prompt, output in zip(MULTIBYTE_PROMPTS, outputs, strict=True):
        split = [t for t in output.token_ids if "\ufffd" in engine.tokenizer.decode([t])]
        assert split, prompt  # the prompt makes characters split over tokens
        request = GenerateRequest(prompt, max_tokens=MAX_TOKENS)
        pieces = list(grpc.stream(request))
        assert "".join(pieces) == grpc.generate(request) == output.text
        assert not any("\ufffd" in piece for piece in pieces[:-1])
        assert "".join(bls.stream(request)) == output.text
    assert postprocessing_requests(server) == before


def postprocessing_requests(server) -> float:
    samples = fetch_metrics(server.endpoints.metrics_url)
    return metric_value(samples, "nv_inference_request_success", model="postprocessing")


def test_bls_answers_like_the_ensemble(server, expected):
    prompt = PROMPTS[4]
    bls_grpc = GrpcClient(server.endpoints.grpc_url, model="tensorrt_llm_bls", timeout_s=120)
    bls_http = HttpClient(server.endpoints.http_url, model="tensorrt_llm_bls", timeout_s=120)
    responses = counted_stream(bls_grpc, prompt)
    assert "".join(r.text or "" for r in responses) == expected[prompt][0]
    assert sum(r.num_tokens for r in responses) == expected[prompt][1]
    assert bls_http.generate(GenerateRequest(prompt, max_tokens=MAX_TOKENS)) == expected[prompt][0]


def test_stop_and_bad_words_reach_the_engine(http, engine):
    prompt = PROMPTS[0]
    words = {
        w: tuple(engine.tokenizer.encode(w, add_special_tokens=False)) for w in (".", " Paris")
    }
    params = SamplingParams(
        max_tokens=MAX_TOKENS, stop_sequences=(words["."],), bad_sequences=(words[" Paris"],)
    )
    want = engine.generate([prompt], params)[0].text
    got = http.generate(
        GenerateRequest(prompt, max_tokens=MAX_TOKENS, stop_words=(".",), bad_words=(" Paris",))
    )
    assert got == want and "Paris" not in got and got.endswith(".")


def engine_counters(server) -> dict[str, float]:
    samples = fetch_metrics(server.endpoints.metrics_url)
    names = (
        "pipeline_engine_batch_size",
        "pipeline_engine_steps",
        "pipeline_engine_prompt_steps",
        "pipeline_engine_generated_tokens",
        "pipeline_engine_running_requests",
    )
    counters = {n: metric_value(samples, n, model="tensorrt_llm") for n in names}
    counters["ensemble_success"] = metric_value(
        samples, "nv_inference_request_success", model="ensemble"
    )
    return counters


def settled_counters(server) -> dict[str, float]:
    """Counters once the engine is idle and the model's metrics poll has caught up."""
    import time

    previous = None
    for _ in range(50):
        counters = engine_counters(server)
        if counters == previous and counters["pipeline_engine_running_requests"] == 0:
            return counters
        previous = counters
        time.sleep(0.2)
    raise AssertionError(f"engine metrics did not settle: {previous}")


def test_64_concurrent_streams_complete_and_are_batched_in_the_engine(server, grpc, engine):
    want = direct(engine, BURST_TOKENS)
    before = settled_counters(server)
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(NUM_BURST_REQUESTS)]
    with ThreadPoolExecutor(max_workers=NUM_BURST_REQUESTS) as pool:
        texts = list(
            pool.map(
                lambda p: "".join(grpc.stream(GenerateRequest(p, max_tokens=BURST_TOKENS))), prompts
            )
        )
    assert texts == [want[p][0] for p in prompts]
    after = settled_counters(server)
    assert after["ensemble_success"] - before["ensemble_success"] == NUM_BURST_REQUESTS
    steps = after["pipeline_engine_steps"] - before["pipeline_engine_steps"]
    tokens = after["pipeline_engine_generated_tokens"] - before["pipeline_engine_generated_tokens"]
    assert tokens == sum(want[p][1] for p in prompts)
    # one request at a time would generate at most one token per step
    assert tokens > 2 * steps, (tokens, steps)
    # every prompt was fed in some step; the steps after the last prompt only decoded
    prompt_steps = after["pipeline_engine_prompt_steps"] - before["pipeline_engine_prompt_steps"]
    assert 1 <= prompt_steps < steps, (prompt_steps, steps)
    assert after["pipeline_engine_batch_size"] > 1
    # where the streams' time went inside the model: every hop measured (p50 <= p99, a mean)
    samples = fetch_metrics(server.endpoints.metrics_url)
    for hop in HOPS:
        p50, p99, mean = (
            metric_value(samples, f"pipeline_{hop}_ms_{q}", model="tensorrt_llm")
            for q in ("p50", "p99", "mean")
        )
        assert 0 < p50 <= p99, hop
        assert 0 < mean, hop


def test_errors_reach_the_client(grpc, http):
    too_long = GenerateRequest("hello " * 400, max_tokens=4)  # over the engine's max_input_len
    for call in (
        grpc.generate,
        http.generate,
        lambda r: list(http.stream(r)),
        lambda r: list(grpc.stream(r)),
    ):
        with pytest.raises(ClientError, match="max_input_len=192"):
            call(too_long)


def assert_still_serves(server, http, expected) -> None:
    """Readiness says ready, and the engine answers every model with the same greedy text."""
    assert cli.main(["--url", server.endpoints.http_url, "--protocol", "http", "ready",
                     "--metrics-url", server.endpoints.metrics_url]) == 0  # fmt: skip
    request = GenerateRequest(PROMPTS[0], max_tokens=MAX_TOKENS)
    assert http.generate(request) == expected[PROMPTS[0]][0]
    bls = HttpClient(server.endpoints.http_url, model="tensorrt_llm_bls", timeout_s=120)
    assert bls.generate(request) == expected[PROMPTS[0]][0]


def test_a_nan_temperature_is_refused_and_the_engine_serves_on(server, http, expected):
    """Sent as curl sends it (a NaN literal in the JSON body) and through the gRPC client (the
    HTTP client's JSON refuses NaN itself): once, it stopped the engine for every user while the
    server still said ready."""
    url = f"{server.endpoints.http_url}/v2/models/ensemble/generate"
    body = '{"text_input":"Hi","max_tokens":8,"temperature":NaN,"top_k":5}'
    response = requests.post(url, data=body, timeout=120)
    assert response.status_code == 400 and "temperature=nan" in response.text
    grpc_client = GrpcClient(server.endpoints.grpc_url, timeout_s=120)
    nan = GenerateRequest("Hi", max_tokens=8, temperature=float("nan"), top_k=5)
    for call in (grpc_client.generate, lambda r: list(grpc_client.stream(r))):
        with pytest.raises(ClientError, match="temperature=nan is not a finite number"):
            call(nan)
    assert_still_serves(server, http, expected)


def test_an_out_of_vocabulary_bad_word_is_refused_and_the_engine_serves_on(
    server, http, expected, engine
):
    client = GrpcClient(server.endpoints.grpc_url, model="tensorrt_llm", timeout_s=120)
    prompt = engine.tokenizer.encode(PROMPTS[1])
    arrays = {
        "input_ids": np.array([prompt], np.int32),
        "input_lengths": np.array([[len(prompt)]], np.int32),
        "request_output_len": np.array([[8]], np.int32),
        "bad_words_list": np.array([[[999_999_999], [1]]], np.int32),
    }
    with pytest.raises(ClientError, match=r"bad words token ids \[999999999\] are outside"):
        list(client.responses(arrays, output="output_ids"))
    assert_still_serves(server, http, expected)


def test_cancelled_request_leaves_the_engine(server, engine):
    """Cancelling reaches the engine when the LLM model is called directly (Triton 2.51 does not
    pass an ensemble's cancellation on to its steps)."""
    client = GrpcClient(server.endpoints.grpc_url, model="tensorrt_llm", timeout_s=120)
    prompt = engine.tokenizer.encode(PROMPTS[5])
    arrays = {
        "input_ids": np.array([prompt], np.int32),
        "input_lengths": np.array([[len(prompt)]], np.int32),
        "request_output_len": np.array([[150]], np.int32),
        "end_id": np.array([[-1]], np.int32),
        "streaming": np.array([[True]]),
    }
    before = settled_counters(server)["pipeline_engine_generated_tokens"]
    responses = client.responses(arrays, output="output_ids")
    assert next(responses).is_final is False
    responses.close()  # stops the gRPC stream, cancelling the request
    generated = settled_counters(server)["pipeline_engine_generated_tokens"] - before
    assert generated < 150


def test_cli_as_the_readme_shows(server, expected, capsys):
    grpc_url, http_url = server.endpoints.grpc_url, server.endpoints.http_url
    prompt, max_tokens = PROMPTS[6], str(MAX_TOKENS)

    def run(*argv: str):
        return cli.main(list(argv)), capsys.readouterr()

    code, out = run("--url", grpc_url, "ready")
    assert code == 0 and out.out == f"ready: ensemble at {grpc_url}\n"
    code, out = run("--url", grpc_url, "generate", prompt, "--stream", "--max-tokens", max_tokens)
    assert code == 0 and out.out == expected[prompt][0] + "\n"
    http = ("--protocol", "http", "--url", http_url)
    code, out = run(*http, "generate", prompt, "--max-tokens", max_tokens)
    assert code == 0 and out.out == expected[prompt][0] + "\n"
    code, out = run(*http, "infer", "preprocessing", "QUERY=Hello", "REQUEST_OUTPUT_LEN=4")
    assert code == 0 and "REQUEST_INPUT_LEN: [[1]]" in out.out
    metrics_url = server.endpoints.metrics_url
    code, out = run("metrics", "pipeline_engine_batch_size", "--metrics-url", metrics_url)
    assert code == 0 and "pipeline_engine_batch_size" in out.out
    code, out = run("--url", grpc_url, "generate", "")
    assert code == 1 and "error: client: ensemble at" in out.err


def test_python_models_run_in_the_stub_env(server, stub_python3):
    processes = psutil.Process(server.process.pid).children(recursive=True)
    stubs = [p for p in processes if "triton_python_backend_stub" in " ".join(p.cmdline())]
    # preprocessing, postprocessing, tensorrt_llm_bls, and two tensorrt_llm instances
    assert len(stubs) == 5
    for stub in stubs:
        assert stub.environ()["PATH"].split(":")[0] == str(stub_python3.parent)
    engines = [
        p for p in processes if "pipeline.engine.core.engine_process" in " ".join(p.cmdline())
    ]
    assert len(engines) == 1  # the two instances share it


def test_ready_reads_the_metrics_of_the_server_it_was_pointed_at(server, capsys):
    """The server runs on free (non-default) ports: the metrics URL comes from its own
    --metrics-port, and a metrics endpoint that cannot be read is not ready, naming it."""
    grpc_url, http_url = server.endpoints.grpc_url, server.endpoints.http_url
    assert metrics_url_for(grpc_url) == server.endpoints.metrics_url
    assert metrics_url_for(http_url) == server.endpoints.metrics_url
    assert cli.main(["--protocol", "http", "--url", http_url, "ready"]) == 0
    (unused,) = free_ports(1)
    elsewhere = f"http://127.0.0.1:{unused}/metrics"
    assert cli.main(["--url", grpc_url, "ready", "--metrics-url", elsewhere]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"not ready: ensemble at {grpc_url} is up")
    assert f"its metrics at {elsewhere} cannot be read" in err


def test_server_stops_cleanly(server):
    pgid, prefix = server.process.pid, server.shm_prefix
    assert list(SHM_DIR.glob(f"{prefix}*")), "the python models should hold shm while running"
    server.stop()
    assert server.process.returncode == 0  # exited on SIGTERM, not killed
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)  # no stub left in the server's process group
    assert not list(SHM_DIR.glob(f"{prefix}*"))
    assert not server.tmp_dir.exists()


def test_ready_after_the_server_stopped_is_not_ready(server, capsys):
    server.stop()
    grpc_url = server.endpoints.grpc_url
    assert cli.main(["--url", grpc_url, "ready", "--wait", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"not ready after 1 s: ensemble at {grpc_url}")
