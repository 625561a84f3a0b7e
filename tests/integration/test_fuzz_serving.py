"""One bad request never takes the server down: property-based requests (hypothesis) over every
client input of `ensemble`, `tensorrt_llm_bls` and `tensorrt_llm`, over gRPC and HTTP, against
one real tritonserver serving the shared SmolLM2 torch engine.

The property, for every case: it gets an answer or a clear error (fuzz_ledger), within
REQUEST_TIMEOUT_S; a request in flight beside it is not disturbed; afterwards the server is the
same live, ready process and gives the fixed greedy canary's text as before (fuzz_server). The
counts are fixed and the generation derandomized, so CI tries the same cases every run; each
nasty value the issue tracker has seen is an explicit example, tried every run. A death or a
failure does not stop the run: every case is tried, and the report lists them all.

One test, so that pytest-xdist keeps the whole run on one worker and one server.
"""

import json
import time

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings

from pipeline.stages import deploy
from pipeline.triton_repo.engine_info import EngineInfo
from tests.conftest import served_smollm_spec
from tests.integration.fuzz_cases import Case, cases
from tests.integration.fuzz_ledger import markdown
from tests.integration.fuzz_server import FuzzedServer
from tests.integration.fuzz_values import GRPC, HTTP, HTTP_STREAM, INVALID, Limits, Value

pytestmark = [pytest.mark.triton, pytest.mark.slow]

# generated cases per entry point, on top of the explicit ones: a case with its witness and
# checks takes 1.5-2 s of a 2-core CPU that runs the other pytest worker beside it
NUM_CASES = {"ensemble": 35, "tensorrt_llm_bls": 25, "tensorrt_llm": 35}
NAN = float("nan")
HI = Value("Hi")


def _case(model, protocol, inputs, nasty, outputs=("text_output",), body=None) -> Case:
    return Case(model, protocol, inputs, nasty, outputs, body)


def _sampled_nan(model: str, protocol: str) -> Case:
    """temperature NaN with top_k 5: the sampler's probabilities turn NaN."""
    tokens = "request_output_len" if model == "tensorrt_llm" else "max_tokens"
    top_k = "runtime_top_k" if model == "tensorrt_llm" else "top_k"
    inputs = {"text_input": HI, tokens: Value(8), "temperature": Value(NAN), top_k: Value(5)}
    return _case(model, protocol, inputs, {"temperature": INVALID})


def _llm_ids(nasty: str, **extra: Value) -> Case:
    """A prompt of ids to tensorrt_llm, with `nasty` among the extra inputs."""
    inputs = {"input_ids": Value([1, 2, 3], "list"), "request_output_len": Value(4), **extra}
    return _case("tensorrt_llm", GRPC, inputs, {nasty: INVALID}, ("output_ids", "sequence_length"))


EXAMPLES = {
    "ensemble": [
        _sampled_nan("ensemble", GRPC),
        _case(
            "ensemble",
            HTTP,
            {},
            {"temperature": INVALID},
            body=b'{"text_input":"Hi","max_tokens":8,"temperature":NaN,"top_k":5}',
        ),
        # text_input left out, two inputs sent: Triton's input count check lets it through
        _case(
            "ensemble",
            GRPC,
            {"max_tokens": Value(8), "stream": Value(True)},
            {"text_input": INVALID},
        ),
        _case(
            "ensemble",
            HTTP,
            {"max_tokens": Value(8), "stream": Value(False)},
            {"text_input": INVALID},
        ),
        _case(
            "ensemble",
            HTTP_STREAM,
            {"max_tokens": Value(8), "stream": Value(True)},
            {"text_input": INVALID},
        ),
        _case(
            "ensemble",
            HTTP,
            {"text_input": HI, "max_tokens": Value(10**12)},
            {"max_tokens": INVALID},
        ),
        _case(
            "ensemble",
            GRPC,
            {"text_input": Value(b"\xff\xfe"), "max_tokens": Value(4)},
            {"text_input": INVALID},
        ),
    ],
    "tensorrt_llm_bls": [
        _sampled_nan("tensorrt_llm_bls", GRPC),
        _sampled_nan("tensorrt_llm_bls", HTTP_STREAM),
        _case(
            "tensorrt_llm_bls",
            HTTP_STREAM,
            {"max_tokens": Value(8), "stream": Value(True)},
            {"text_input": INVALID},
        ),
    ],
    "tensorrt_llm": [
        _sampled_nan("tensorrt_llm", GRPC),
        _llm_ids("bad_words_list", bad_words_list=Value([[999_999_999], [1]], "words")),
        _llm_ids("stop_words_list", stop_words_list=Value([[999_999_999], [1]], "words")),
        _llm_ids("runtime_top_p", runtime_top_p=Value(NAN)),
        _llm_ids("temperature", temperature=Value(float("inf")), runtime_top_k=Value(5)),
    ],
}


@pytest.fixture(scope="module")
def limits(smollm_engine_dir) -> Limits:
    engine = EngineInfo.read(smollm_engine_dir)
    config = json.loads((smollm_engine_dir / "config.json").read_text())
    vocab_size = config["pretrained_config"]["vocab_size"]
    return Limits(vocab_size, engine.max_input_len, engine.max_seq_len)


@pytest.fixture(scope="module")
def fuzzed(session_workdir, smollm_engine_dir):
    spec = served_smollm_spec(session_workdir, "fuzz_model_repo")
    deploy.run(spec)
    server = FuzzedServer(spec)
    server.start()
    yield server
    server.close()


def _campaign(fuzzed: FuzzedServer, model: str, limits: Limits) -> None:
    def each(case: Case) -> None:
        fuzzed.try_case(case)

    run = given(cases(model, limits))(each)
    for case in EXAMPLES[model]:
        run = example(case)(run)
    settings(
        max_examples=NUM_CASES[model],
        deadline=None,
        derandomize=True,
        database=None,
        phases=(Phase.explicit, Phase.generate),  # nothing to shrink: the ledger never raises
        suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large),
        print_blob=False,
    )(run)()


def test_no_request_takes_the_server_down(fuzzed, limits, tmp_path_factory, record_property):
    start, canary = time.monotonic(), {"problems": ["the run did not get to it"]}
    try:
        for model in NUM_CASES:
            _campaign(fuzzed, model, limits)
        canary = fuzzed.final_check()
    finally:  # the report also when the harness itself failed
        report = fuzzed.ledger.report(
            wall_s=time.monotonic() - start,
            case_s=fuzzed.case_s,  # the cases with their witness and checks
            recovery_s=fuzzed.recovery_s,  # waiting for a dead server, restarting it
            server_starts=fuzzed.num_starts,
            canary=canary,
        )
        text = markdown(report)
        out_dir = tmp_path_factory.mktemp("fuzz_serving")
        (out_dir / "fuzz_serving.json").write_text(json.dumps(report, indent=2, default=str))
        (out_dir / "fuzz_serving.md").write_text(text + "\n")
        record_property("summary", f"{text}\n\nreport: {out_dir}")
        print(text)
    assert report["server_deaths"] == 0 and report["requests_lost"] == 0, text
    assert not report["failures"], text
    assert not canary["problems"], canary
    assert canary["grpc_after"] == canary["http_after"] == canary["before"], canary
    assert fuzzed.num_starts == 1
