"""tensorrt_llm_bls: preprocessing -> tensorrt_llm -> postprocessing as BLS calls, per request.

Each request is served from its own thread when decoupled, so one instance keeps many requests in
flight and the LLM model batches them. accumulate_tokens: when streaming, detokenize all tokens
so far and send the new text (multi-byte characters split over tokens come out whole).
llm_text_output: the LLM model returns text_output itself (backend=torch), whole characters
included; its responses are passed on and postprocessing is not called.

Cancellation: Triton 2.51's python backend can neither pass a request's cancellation on to the BLS
requests it made nor cancel one (its response iterator has no cancel() before 25.04), so a
cancelled stream sends the LLM model a `stop` request with its LLM request's id, the tensorrtllm
backend's way to cancel, and the LLM request ends at its next response.
"""

import json
import threading
import uuid

import numpy as np
import triton_python_backend_utils as pb_utils
from input_checks import check_inputs  # copied beside this file by the deploy stage

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
PREPROCESSING_INPUTS = {
    "text_input": "QUERY",
    "max_tokens": "REQUEST_OUTPUT_LEN",
    "bad_words": "BAD_WORDS_DICT",
    "stop_words": "STOP_WORDS_DICT",
    "end_id": "END_ID",
    "pad_id": "PAD_ID",
}
PREPROCESSED = {
    "INPUT_ID": "input_ids",
    "REQUEST_INPUT_LEN": "input_lengths",
    "REQUEST_OUTPUT_LEN": "request_output_len",
    "OUT_END_ID": "end_id",
    "OUT_PAD_ID": "pad_id",
    "STOP_WORDS_IDS": "stop_words_list",
    "BAD_WORDS_IDS": "bad_words_list",
}
# Triton 2.51 checks required inputs by their number only: one left out can still arrive
REQUIRED_INPUTS = ("text_input", "max_tokens")
SAMPLING_INPUTS = {
    "top_k": "runtime_top_k",
    "top_p": "runtime_top_p",
    "temperature": "temperature",
    "seed": "seed",
    "stream": "streaming",
    "exclude_input_in_output": "exclude_input_in_output",
}


def _param(params: dict, key: str, default: str) -> str:
    value = params.get(key, {}).get("string_value", "")
    return default if not value or value.startswith("${") else value


def _stop_inputs() -> list:
    """A `stop` request: the LLM model's required inputs (unused) and stop=true."""
    return [
        pb_utils.Tensor("input_ids", np.zeros((1, 1), np.int32)),
        pb_utils.Tensor("input_lengths", np.ones((1, 1), np.int32)),
        pb_utils.Tensor("request_output_len", np.ones((1, 1), np.int32)),
        pb_utils.Tensor("stop", np.ones((1, 1), np.bool_)),
    ]


def _check(response):
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return response


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.llm_name = _param(params, "tensorrt_llm_model_name", "tensorrt_llm")
        self.accumulate = _param(params, "accumulate_tokens", "false").lower() in ("true", "1")
        self.llm_text = _param(params, "llm_text_output", "false").lower() in ("true", "1")
        self.llm_outputs = ["text_output" if self.llm_text else "output_ids", "sequence_length"]

    def execute(self, requests):
        if not self.decoupled:
            return [self._unary(request) for request in requests]
        for request in requests:
            threading.Thread(target=self._stream, args=(request,), daemon=True).start()
        return None

    def _unary(self, request):
        try:
            return self._texts(request, streaming_allowed=False)[-1]
        except pb_utils.TritonModelException as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))

    def _stream(self, request):
        sender = request.get_response_sender()
        try:
            for response in self._texts(request, streaming_allowed=True, sender=sender):
                sender.send(response)
            sender.send(flags=FINAL)  # also when cancelled: it releases the request
        except Exception as exc:  # whatever failed must reach the client and close the request
            sender.send(
                pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))), flags=FINAL
            )

    def _texts(self, request, streaming_allowed: bool, sender=None):
        """The text_output responses for one request (a list, or a generator when streaming)."""
        inputs = {
            name: tensor
            for name in (*PREPROCESSING_INPUTS, *SAMPLING_INPUTS)
            if (tensor := pb_utils.get_input_tensor_by_name(request, name)) is not None
        }
        missing = [name for name in REQUIRED_INPUTS if name not in inputs]
        if missing:
            raise pb_utils.TritonModelException(
                f"tensorrt_llm_bls: missing required input {' and '.join(missing)}; send it"
            )
        try:
            check_inputs({name: t.as_numpy() for name, t in inputs.items()})
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"tensorrt_llm_bls: {exc}") from None
        stream = "stream" in inputs and bool(inputs["stream"].as_numpy().reshape(-1)[0])
        if stream and not streaming_allowed:
            raise pb_utils.TritonModelException(
                "stream=true needs the decoupled deployment (deploy.decoupled_mode=true)"
            )
        llm_inputs = self._preprocess(inputs)
        llm_inputs += [
            pb_utils.Tensor(SAMPLING_INPUTS[name], inputs[name].as_numpy())
            for name in SAMPLING_INPUTS
            if name in inputs
        ]
        llm_request = pb_utils.InferenceRequest(
            model_name=self.llm_name,
            inputs=llm_inputs,
            requested_output_names=self.llm_outputs,
            request_id=f"bls-{uuid.uuid4().hex}",  # what a `stop` request names
        )
        if not self.decoupled:
            return [self._llm_response(_check(llm_request.exec()))]
        responses = llm_request.exec(decoupled=True)
        return self._deltas(responses, stream, sender, llm_request.request_id())

    def _stop(self, request_id: str, responses) -> None:
        """Cancel the LLM request `request_id`, then take its responses up to the final one (the
        response iterator would wait for them anyway when it is dropped)."""
        stop = pb_utils.InferenceRequest(
            model_name=self.llm_name,
            inputs=_stop_inputs(),
            requested_output_names=self.llm_outputs,
            request_id=request_id,
        )
        for _ in stop.exec(decoupled=True):
            pass
        for _ in responses:
            pass

    def _deltas(self, responses, stream: bool, sender, request_id: str):
        tokens, sent_text, num_unsent = [], "", 0
        for response in responses:
            if sender.is_cancelled():
                self._stop(request_id, responses)
                return
            if self.llm_text:
                if pb_utils.get_output_tensor_by_name(_check(response), "text_output") is not None:
                    yield self._llm_response(response)
                continue
            new = self._tokens(_check(response))
            if new is None:
                continue  # an empty final response
            if not stream:
                yield self._text_response(new)
                continue
            if not self.accumulate:
                yield self._text_response(new)
                continue
            tokens.extend(new.tolist())
            num_unsent += len(new)
            text = self._decode(np.array(tokens, dtype=np.int32))
            if text.endswith("\ufffd"):
                continue  # a multi-byte character is still incomplete
            yield self._string_response(text[len(sent_text) :], num_unsent)
            sent_text, num_unsent = text, 0

    def _preprocess(self, inputs) -> list:
        request = pb_utils.InferenceRequest(
            model_name="preprocessing",
            inputs=[
                pb_utils.Tensor(PREPROCESSING_INPUTS[name], inputs[name].as_numpy())
                for name in PREPROCESSING_INPUTS
                if name in inputs
            ],
            requested_output_names=list(PREPROCESSED),
        )
        response = _check(request.exec())
        return [
            pb_utils.Tensor(
                PREPROCESSED[name], pb_utils.get_output_tensor_by_name(response, name).as_numpy()
            )
            for name in PREPROCESSED
        ]

    @staticmethod
    def _tokens(response):
        """The first beam's valid tokens, or None for a response without outputs."""
        ids = pb_utils.get_output_tensor_by_name(response, "output_ids")
        if ids is None:
            return None
        lengths = pb_utils.get_output_tensor_by_name(response, "sequence_length").as_numpy()
        return ids.as_numpy().reshape(-1, ids.as_numpy().shape[-1])[
            0, : int(lengths.reshape(-1)[0])
        ]

    def _decode(self, tokens: np.ndarray) -> str:
        request = pb_utils.InferenceRequest(
            model_name="postprocessing",
            requested_output_names=["OUTPUT"],
            inputs=[
                pb_utils.Tensor("TOKENS_BATCH", tokens.astype(np.int32).reshape(1, 1, -1)),
                pb_utils.Tensor("SEQUENCE_LENGTH", np.array([[len(tokens)]], np.int32)),
            ],
        )
        text = pb_utils.get_output_tensor_by_name(_check(request.exec()), "OUTPUT").as_numpy()
        return text.reshape(-1)[0].decode()

    def _llm_response(self, response):
        """The client's response for one LLM response (its tokens decoded unless it has text)."""
        if not self.llm_text:
            return self._text_response(self._tokens(response))
        text = pb_utils.get_output_tensor_by_name(response, "text_output").as_numpy()
        length = pb_utils.get_output_tensor_by_name(response, "sequence_length").as_numpy()
        return self._string_response(text.reshape(-1)[0].decode(), int(length.reshape(-1)[0]))

    def _text_response(self, tokens: np.ndarray):
        return self._string_response(self._decode(tokens), len(tokens))

    @staticmethod
    def _string_response(text: str, num_tokens: int):
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("text_output", np.array([[text.encode()]], dtype=np.object_)),
                pb_utils.Tensor("sequence_length", np.array([[num_tokens]], np.int32)),
            ]
        )
