"""The requests NVIDIA's own Triton clients send (triton-inference-server/tensorrtllm_backend at
c2e65b88: inflight_batcher_llm/client/end_to_end_grpc_client.py and
inflight_batcher_llm_client.py, tools/inflight_batcher_llm/end_to_end_test.py and
benchmark_core_model.py), against the served SmolLM2 on both transaction policies. Every
response's outputs are checked against upstream's configs: names, data types, shapes and order
(tests/unit/triton_repo/upstream_configs.py; docs/trtllm_reference.md, section 9.7)."""

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from pipeline.server import launch
from pipeline.stages import deploy
from tests.conftest import served_smollm_spec
from tests.unit.triton_repo.upstream_configs import UPSTREAM

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPTS = ["My favourite animal is the cat. My favourite", "The capital of France is"]
NUM_TOKENS = 6
WIRE_TYPES = {"STRING": "BYTES"}


@pytest.fixture(scope="module")
def servers(session_workdir, smollm_engine_dir):
    """The default (decoupled) deployment, and deploy.decoupled_mode=false ("unary")."""
    decoupled = served_smollm_spec(session_workdir, "upstream_clients_repo")
    unary = served_smollm_spec(
        session_workdir, "upstream_clients_unary_repo", "deploy.decoupled_mode=false"
    )
    deploy.run(decoupled)
    deploy.run(unary)
    with launch.local_server(decoupled.deploy, decoupled.workdir) as one:
        with launch.local_server(unary.deploy, unary.workdir) as other:
            yield {"decoupled": one, "unary": other}


def tensor(module, name: str, value: np.ndarray):
    t = module.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
    t.set_data_from_numpy(value)
    return t


def described(result) -> list[tuple[str, str, list[int]]]:
    """A response's outputs as sent: (name, wire data type, shape), in their order."""
    response = result.get_response()
    if isinstance(response, dict):  # HTTP
        return [(o["name"], o["datatype"], list(o["shape"])) for o in response.get("outputs", [])]
    return [(o.name, o.datatype, list(o.shape)) for o in response.outputs]


def check_upstream_shapes(model: str, result, batch: int = 1, beams: int = 1) -> None:
    """Names in the order of upstream's config (ours after; an ensemble's by name, as Triton
    orders every ensemble's), its data types, and its dims after the batch dim; text outputs
    flat ([batch * beams]), as upstream's models send them."""
    upstream, ours = UPSTREAM[model]
    declared = {name: (dtype, dims) for name, dtype, dims in (*upstream, *ours)}
    order = sorted(declared) if model == "ensemble" else list(declared)
    sent = described(result)
    names = [name for name, _, _ in sent]
    assert names == sorted(names, key=order.index), f"{model}: {names} not in {order}"
    for name, dtype, shape in sent:
        want_type, dims = declared[name]
        assert dtype == WIRE_TYPES.get(want_type, want_type), (model, name, dtype)
        if name in ("text_output", "OUTPUT"):
            assert shape == [batch * beams], (model, name, shape)
            continue
        assert len(shape) == 1 + len(dims), (model, name, shape, dims)
        assert shape[0] == batch, (model, name, shape)
        assert all(d == -1 or d == s for d, s in zip(dims, shape[1:], strict=True)), (
            model,
            name,
            shape,
        )


def stream(server, model: str, inputs: dict, outputs: list[str], request_id: str = "") -> list:
    """As upstream's gRPC clients: open a stream, send, close it (which waits for the final
    response); every result, an error raised."""
    client = grpcclient.InferenceServerClient(server.endpoints.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put(error or result))
    client.async_stream_infer(
        model,
        [tensor(grpcclient, name, value) for name, value in inputs.items()],
        outputs=[grpcclient.InferRequestedOutput(name) for name in outputs],
        request_id=request_id,
    )
    client.stop_stream()
    client.close()
    got = []
    while not results.empty():
        result = results.get()
        if isinstance(result, InferenceServerException):
            raise result
        got.append(result)
    return got


def infer(
    server, model: str, inputs: dict, outputs: list[str] | None, protocol: str, request_id=""
):
    """Plain ModelInfer (gRPC) or /infer (HTTP), as end_to_end_test.py calls it."""
    module, url = (
        (grpcclient, server.endpoints.grpc_url)
        if protocol == "grpc"
        else (httpclient, server.endpoints.http_url.removeprefix("http://"))
    )
    client = module.InferenceServerClient(url)
    try:
        return client.infer(
            model,
            [tensor(module, name, value) for name, value in inputs.items()],
            outputs=None
            if outputs is None
            else [module.InferRequestedOutput(name) for name in outputs],
            request_id=request_id,
        )
    finally:
        client.close()


def e2e_inputs(prompts: list[str], streaming: bool, **extra) -> dict:
    """end_to_end_grpc_client.py's prepare_inputs (its defaults), prompts stacked on the batch
    dim as its --batch-inputs does."""
    size = len(prompts)
    inputs = {
        "text_input": np.array([[p] for p in prompts], dtype=object),
        "max_tokens": np.full((size, 1), NUM_TOKENS, np.int32),
        "stream": np.full((size, 1), streaming),
        "beam_width": np.ones((size, 1), np.int32),
        "temperature": np.ones((size, 1), np.float32),
        "exclude_input_in_output": np.zeros((size, 1), bool),
    }
    dtypes = {bool: bool, int: np.int32, float: np.float32}
    return inputs | {
        name: np.full((size, 1), value, dtypes[type(value)]) for name, value in extra.items()
    }


def texts(results) -> dict[int, str]:
    """batch_index -> the text of its responses joined."""
    joined: dict[int, str] = {}
    for result in results:
        index = result.as_numpy("batch_index")
        index = 0 if index is None else int(index[0][0])
        joined[index] = joined.get(index, "") + result.as_numpy("text_output")[0].decode()
    return joined


@pytest.fixture(scope="module")
def greedy(servers) -> list[str]:
    """Each prompt's generated text, alone in its request (upstream's defaults are greedy)."""
    inputs = [e2e_inputs([p], False, exclude_input_in_output=True) for p in PROMPTS]
    return [texts(stream(servers["decoupled"], "ensemble", i, ["text_output"]))[0] for i in inputs]


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
@pytest.mark.parametrize("streaming", [False, True])
def test_end_to_end_grpc_client(servers, greedy, model, streaming):
    outputs = ["text_output", "cum_log_probs", "output_log_probs"]
    # exclude_input_in_output=false: the prompt leads a whole answer (a stream sends new tokens)
    want = greedy if streaming else [p + text for p, text in zip(PROMPTS, greedy, strict=True)]
    inputs = e2e_inputs(PROMPTS[:1], streaming, return_log_probs=True)
    results = stream(servers["decoupled"], model, inputs, outputs)
    for result in results:
        check_upstream_shapes(model, result)
    assert texts(results) == {0: want[0]}
    # --batch-inputs: both prompts in one request, answered apart with their batch_index
    results = stream(
        servers["decoupled"], model, e2e_inputs(PROMPTS, streaming), [*outputs, "batch_index"]
    )
    for result in results:
        check_upstream_shapes(model, result)
    assert texts(results) == dict(enumerate(want))


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_end_to_end_grpc_client_exclude_input_and_refusals(servers, greedy, model):
    results = stream(
        servers["decoupled"],
        model,
        e2e_inputs(PROMPTS[:1], False) | {"exclude_input_in_output": np.ones((1, 1), bool)},
        ["text_output"],
    )
    assert texts(results) == {0: greedy[0]}
    with pytest.raises(InferenceServerException, match="beam_width=2"):
        stream(servers["decoupled"], model, e2e_inputs(PROMPTS[:1], False, beam_width=2), [])


def ifb_inputs(engine_tokenizer, streaming: bool, **extra) -> dict:
    """inflight_batcher_llm_client.py's prepare_inputs, with its defaults (top_k 1, top_p 0)."""
    ids = engine_tokenizer.encode(PROMPTS[0])
    eos = engine_tokenizer.eos_token_id
    inputs = {
        "input_ids": np.array([ids], np.int32),
        "input_lengths": np.array([[len(ids)]], np.int32),
        "request_output_len": np.array([[NUM_TOKENS]], np.int32),
        "beam_width": np.array([[1]], np.int32),
        "temperature": np.array([[1.0]], np.float32),
        "streaming": np.array([[streaming]], bool),
        "end_id": np.array([[eos]], np.int32),
        "pad_id": np.array([[eos]], np.int32),
        "runtime_top_k": np.array([[1]], np.int32),
        "runtime_top_p": np.array([[0.0]], np.float32),
    }
    return inputs | extra


@pytest.fixture(scope="module")
def tokenizer(smollm_hf_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm_hf_dir)


def test_inflight_batcher_llm_client(servers, tokenizer):
    """Without --streaming: ModelInfer on the unary deployment; with it: a stream; --stop-after-ms
    with a request id stops it, without one is an error; the first output is output_ids."""
    outputs = ["output_ids", "sequence_length", "cum_log_probs", "output_log_probs"]
    logprobs = {"return_log_probs": np.array([[True]], bool)}
    unary = ifb_inputs(tokenizer, False, **logprobs)
    whole = infer(servers["unary"], "tensorrt_llm", unary, outputs, "grpc")
    check_upstream_shapes("tensorrt_llm", whole)
    ids = whole.as_numpy("output_ids")[0][0].tolist()
    assert len(ids) == NUM_TOKENS  # deploy.exclude_input_in_output=true: the default
    results = stream(servers["decoupled"], "tensorrt_llm", ifb_inputs(tokenizer, True), outputs)
    streamed = []
    for result in results:
        check_upstream_shapes("tensorrt_llm", result)
        assert described(result)[0][0] == "output_ids"  # benchmark_core_model reads outputs[0]
        streamed += result.as_numpy("output_ids")[0][0].tolist()
    assert streamed == ids
    with pytest.raises(InferenceServerException, match="streaming=true sends several responses"):
        infer(servers["unary"], "tensorrt_llm", ifb_inputs(tokenizer, True), None, "grpc")
    stop = {
        "input_ids": np.empty((1, 1), np.int32),
        "input_lengths": np.zeros((1, 1), np.int32),
        "request_output_len": np.zeros((1, 1), np.int32),
        "stop": np.ones((1, 1), bool),
    }
    with pytest.raises(InferenceServerException, match="stop=true needs the request id"):
        stream(servers["decoupled"], "tensorrt_llm", stop, [])
    answer = infer(servers["unary"], "tensorrt_llm", stop, None, "grpc", request_id="7")
    assert described(answer) == []  # upstream's "cancellation response": no outputs
    for name, value in [
        ("draft_input_ids", np.array([[1, 2]], np.int32)),
        ("lookahead_verification_set_size", np.array([[3]], np.int32)),
    ]:
        with pytest.raises(InferenceServerException, match=f"{name}=.*speculative decoding"):
            stream(
                servers["decoupled"],
                "tensorrt_llm",
                ifb_inputs(tokenizer, True, **{name: value}),
                [],
            )


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_end_to_end_test(servers, greedy, protocol):
    """Its test_functionality_ifb on the unary deployment: preprocessing, tensorrt_llm (with the
    decoder ids preprocessing gives) and postprocessing by hand, then ensemble and the BLS."""
    server = servers["unary"]
    words = np.array([[""]], dtype=object)
    pre = infer(
        server,
        "preprocessing",
        {
            "QUERY": np.array([[PROMPTS[0]]], dtype=object),
            "BAD_WORDS_DICT": words,
            "STOP_WORDS_DICT": words,
            "REQUEST_OUTPUT_LEN": np.array([[NUM_TOKENS]], np.int32),
        },
        None,
        protocol,
    )
    check_upstream_shapes("preprocessing", pre)
    llm = infer(
        server,
        "tensorrt_llm",
        {
            "input_ids": pre.as_numpy("INPUT_ID"),
            "decoder_input_ids": pre.as_numpy("DECODER_INPUT_ID"),
            "input_lengths": pre.as_numpy("REQUEST_INPUT_LEN"),
            "request_output_len": pre.as_numpy("REQUEST_OUTPUT_LEN"),
            "end_id": pre.as_numpy("OUT_END_ID"),
            "pad_id": pre.as_numpy("OUT_PAD_ID"),
        },
        ["output_ids", "sequence_length"],
        protocol,
    )
    check_upstream_shapes("tensorrt_llm", llm)
    post = infer(
        server,
        "postprocessing",
        {
            "TOKENS_BATCH": llm.as_numpy("output_ids").astype(np.int32),
            "SEQUENCE_LENGTH": llm.as_numpy("sequence_length"),
        },
        ["OUTPUT"],
        protocol,
    )
    check_upstream_shapes("postprocessing", post)
    assert post.as_numpy("OUTPUT")[0].decode() == greedy[0]
    for model in ("ensemble", "tensorrt_llm_bls"):
        inputs = {
            "text_input": np.array([[PROMPTS[0]]], dtype=object),
            "max_tokens": np.array([[NUM_TOKENS]], np.int32),
            "bad_words": words,
            "stop_words": words,
        }
        result = infer(server, model, inputs, ["text_output"], protocol)
        check_upstream_shapes(model, result)
        assert result.as_numpy("text_output")[0].decode() == greedy[0]


def test_stop_ends_a_whole_answer_with_what_it_made(servers, tokenizer):
    """--stop-after-ms without --streaming: the stopped request answers at once, with the tokens
    made so far (a prefix of the unstopped answer), as upstream's backend answers it."""
    server, long = servers["unary"], {"request_output_len": np.array([[200]], np.int32)}
    full = infer(server, "tensorrt_llm", ifb_inputs(tokenizer, False, **long), None, "grpc")
    client = grpcclient.InferenceServerClient(server.endpoints.grpc_url)
    answers: queue.Queue = queue.Queue()
    inputs = ifb_inputs(tokenizer, False, **long)
    client.async_infer(
        "tensorrt_llm",
        [tensor(grpcclient, name, value) for name, value in inputs.items()],
        callback=lambda result, error: answers.put(error or result),
        request_id="stopped",
    )
    stop = {
        "input_ids": np.empty((1, 1), np.int32),
        "input_lengths": np.zeros((1, 1), np.int32),
        "request_output_len": np.zeros((1, 1), np.int32),
        "stop": np.ones((1, 1), bool),
    }
    infer(server, "tensorrt_llm", stop, None, "grpc", request_id="stopped")
    stopped = answers.get(timeout=300)
    client.close()
    made = stopped.as_numpy("output_ids")[0][0].tolist()
    assert made == full.as_numpy("output_ids")[0][0].tolist()[: len(made)]
    assert stopped.as_numpy("sequence_length")[0][0] == len(made)
