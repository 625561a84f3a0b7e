"""A client written for upstream's ensemble and BLS (TensorRT-LLM 1.2's optional inputs, section
9 of docs/trtllm_reference.md) against the served SmolLM2 in the real tritonserver, over gRPC
and HTTP: each input gets its behaviour or an error that names it and the backend, never
"unexpected inference input".

The behaviour is checked against the engine itself, run in this process with the same params.
"""

import json
import queue

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.server import launch
from pipeline.stages import deploy
from tests.conftest import served_smollm_spec

pytestmark = [pytest.mark.triton, pytest.mark.slow]

MODELS = ["ensemble", "tensorrt_llm_bls"]
PROMPT = "My favourite animal is the cat. My favourite"
NUM_TOKENS = 8
PENALIZED = {"repetition_penalty": 1.3, "presence_penalty": 0.5, "frequency_penalty": 0.25}
DTYPES = {
    "text_input": np.object_,
    "max_tokens": np.int32,
    "min_tokens": np.int32,
    "beam_width": np.int32,
    "num_return_sequences": np.int32,
    "top_k": np.int32,
    "num_draft_tokens": np.int32,
    "seed": np.uint64,
    "lora_task_id": np.uint64,
    "embedding_bias_words": np.object_,
    "guided_decoding_guide_type": np.object_,
    "guided_decoding_guide": np.object_,
    "decoder_text_input": np.object_,
    "image_url_input": np.object_,
}
OUTPUTS = [
    "text_output",
    "sequence_length",
    "cum_log_probs",
    "output_log_probs",
    "sequence_index",
    "num_input_tokens",
    "num_output_tokens",
]


@pytest.fixture(scope="module")
def server(session_workdir, smollm_engine_dir):
    spec = served_smollm_spec(session_workdir, "client_interface_model_repo")
    deploy.run(spec)
    with launch.local_server(spec.deploy, spec.workdir) as server:
        yield server


@pytest.fixture(scope="module")
def engine(smollm_engine_dir) -> LLMEngine:
    return LLMEngine.from_engine_dir(smollm_engine_dir, device="cpu")


def array(name: str, value) -> np.ndarray:
    """A batch of one, as a client sends it: a scalar as [1, 1], a list as [1, N]."""
    if isinstance(value, np.ndarray):
        return value
    dtype = DTYPES.get(name, np.bool_ if isinstance(value, bool) else np.float32)
    values = value if isinstance(value, list) else [value]
    return np.asarray([[v.encode() if isinstance(v, str) else v for v in values]], dtype=dtype)


def grpc_responses(server, model: str, values: dict) -> list[dict]:
    """Every response's outputs, up to the final one; raises the request's error."""
    client = grpcclient.InferenceServerClient(server.endpoints.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    inputs = []
    for name, value in {"text_input": PROMPT, "max_tokens": NUM_TOKENS, **values}.items():
        data = array(name, value)
        tensor = grpcclient.InferInput(name, list(data.shape), np_to_triton_dtype(data.dtype))
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    outputs = [grpcclient.InferRequestedOutput(name) for name in OUTPUTS]
    try:
        client.async_stream_infer(model, inputs, outputs=outputs, enable_empty_final_response=True)
        got = []
        while True:
            result, error = results.get(timeout=300)
            if error is not None:
                raise RuntimeError(str(error))
            response = result.get_response()
            if response.outputs:
                got.append({o.name: result.as_numpy(o.name) for o in response.outputs})
            if response.parameters["triton_final_response"].bool_param:
                return got
    finally:
        client.stop_stream()
        client.close()


def http_generate(server, model: str, values: dict, stream: bool = False) -> list[dict]:
    """/generate (one JSON response) or /generate_stream (its SSE chunks); raises the error."""
    body = {"text_input": PROMPT, "max_tokens": NUM_TOKENS, "stream": stream, **values}
    route = "generate_stream" if stream else "generate"
    url = f"{server.endpoints.http_url}/v2/models/{model}/{route}"
    reply = requests.post(url, json=body, timeout=300)
    if reply.status_code != 200:
        raise RuntimeError(reply.json()["error"])
    if not stream:
        return [reply.json()]
    chunks = [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]
    errors = [chunk["error"] for chunk in chunks if "error" in chunk]
    if errors:
        raise RuntimeError(errors[0])
    return chunks


def expected(engine, **params):
    prompt = engine.tokenizer.encode(PROMPT)
    return engine.generate([prompt], SamplingParams(max_tokens=NUM_TOKENS, **params))[0]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_penalties_min_tokens_and_log_probs_are_served(server, engine, model, protocol):
    values = {**PENALIZED, "min_tokens": NUM_TOKENS, "return_log_probs": True}
    values |= {"return_num_input_tokens": True, "return_num_output_tokens": True}
    if protocol == "grpc":
        (response,) = grpc_responses(server, model, values)
        response = {name: value.reshape(-1).tolist() for name, value in response.items()}
        response["text_output"] = response["text_output"][0].decode()
    else:
        (response,) = http_generate(server, model, values)
        response = {
            name: np.asarray(value).reshape(-1).tolist() for name, value in response.items()
        }
        response["text_output"] = response["text_output"][0]
    text, logprobs = response["text_output"], response["output_log_probs"]
    (cum,) = response["cum_log_probs"]
    want = expected(engine, **PENALIZED, min_tokens=NUM_TOKENS, logprobs=0)
    # upstream's counts: the prompt's tokens, and output_ids' (the input left out: the default)
    assert response["num_input_tokens"] == [len(engine.tokenizer.encode(PROMPT))]
    assert response["num_output_tokens"] == [len(want.token_ids)]
    assert text == engine.tokenizer.decode(want.token_ids)
    assert logprobs == pytest.approx(want.logprobs, abs=1e-4)
    assert cum == pytest.approx(sum(want.logprobs), abs=1e-3)
    assert text != engine.tokenizer.decode(expected(engine).token_ids)  # the knobs arrived


@pytest.mark.parametrize("model", MODELS)
def test_a_decoder_prompt_is_taken_and_unused(server, engine, model):
    """decoder_text_input is an encoder-decoder model's; a decoder-only one ignores it, as the
    tensorrtllm backend does (docs/trtllm_reference.md, section 9.6)."""
    (response,) = grpc_responses(server, model, {"decoder_text_input": "Bonjour"})
    text = response["text_output"].reshape(-1)[0].decode()
    assert text == engine.tokenizer.decode(expected(engine).token_ids)


@pytest.mark.parametrize("model", MODELS)
def test_each_returned_sequence_comes_with_its_index(server, engine, model):
    values = {"num_return_sequences": 2, "temperature": 0.9, "top_k": 40, "seed": 7}
    texts = {}
    for response in grpc_responses(server, model, values):
        index = int(response["sequence_index"].reshape(-1)[0])
        texts[index] = texts.get(index, "") + response["text_output"].reshape(-1)[0].decode()
    want = [
        engine.tokenizer.decode(expected(engine, temperature=0.9, top_k=40, seed=seed).token_ids)
        for seed in (7, 8)
    ]
    assert [texts[0], texts[1]] == want and want[0] != want[1]
    chunks = http_generate(server, model, values, stream=True)
    assert sorted({chunk["sequence_index"] for chunk in chunks}) == [0, 1]


UNSERVED = [  # input values -> what the error names, through either model
    ({"beam_width": 2}, "beam_width=2 exceeds the engine's max_beam_width=1"),
    ({"lora_task_id": 3}, "lora_task_id=3 (no LoRA adapters"),
    ({"repetition_penalty": 0.0}, "repetition_penalty=0.0 is outside [1e-06, 1000000.0]"),
]
GRPC_ONLY = [  # 2-D tensors the HTTP generate extension cannot shape
    ({"prompt_embedding_table": np.ones((1, 2, 576), np.float16)}, "prompt_embedding_table="),
    ({"lora_weights": np.ones((1, 2, 8), np.float16)}, "lora_weights="),
]


def refusal(server, model: str, protocol: str, values: dict) -> str:
    call = grpc_responses if protocol == "grpc" else http_generate
    with pytest.raises(RuntimeError) as info:
        call(server, model, values)
    message = str(info.value)
    assert "unexpected inference input" not in message
    return message


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize(("values", "named"), UNSERVED)
def test_what_the_torch_engine_cannot_serve_is_named(server, model, protocol, values, named):
    message = refusal(server, model, protocol, values)
    assert named in message
    assert any(why in message for why in ("backend=torch", "is outside", "max_beam_width"))


BIAS_WORDS = {"embedding_bias_words": ["cat"], "embedding_bias_weights": [100.0]}


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_embedding_bias_words_are_served_by_the_bls_and_named_by_the_torch_ensemble(
    server, engine, protocol
):
    """The BLS runs preprocessing, which turns the words into the per-vocabulary embedding_bias
    the torch tensorrt_llm serves; the torch ensemble is tensorrt_llm alone (it tokenizes
    itself), which takes no words."""
    call = grpc_responses if protocol == "grpc" else http_generate
    responses = call(server, "tensorrt_llm_bls", BIAS_WORDS)
    pieces = [np.asarray(r["text_output"]).reshape(-1)[0] for r in responses]
    text = "".join(p.decode() if isinstance(p, bytes) else str(p) for p in pieces)
    assert text != engine.tokenizer.decode(expected(engine).token_ids)
    assert text.count("cat") >= NUM_TOKENS // 2  # +100 on the word's token: it is all it says
    assert "no embedding bias" in refusal(server, "ensemble", protocol, BIAS_WORDS)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(("values", "named"), GRPC_ONLY)
def test_tensors_the_torch_engine_cannot_use_are_named(server, model, values, named):
    message = refusal(server, model, "grpc", values)
    assert named in message and "backend=torch" in message


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize(
    ("model", "values", "named"),
    [
        ("tensorrt_llm_bls", {"image_url_input": "http://x"}, "image_url_input needs a multimodal"),
        ("tensorrt_llm_bls", {"num_draft_tokens": 4}, "num_draft_tokens needs a draft model"),
    ],
)
def test_inputs_for_models_the_pipeline_does_not_deploy_are_named(
    server, protocol, model, values, named
):
    assert named in refusal(server, model, protocol, values)
