"""tensorrt_llm_bls: preprocessing -> tensorrt_llm -> postprocessing as BLS calls, per request.

Each request is served from its own thread when decoupled, so one instance keeps many requests in
flight and the LLM model batches them. accumulate_tokens: when streaming, detokenize all tokens
so far and send the new text (multi-byte characters split over tokens come out whole).
llm_text_output: the LLM model returns text_output itself (backend=torch), whole characters
included; its responses are passed on and postprocessing is not called.

Upstream's client interface (docs/trtllm_reference.md, section 9.1): every ensemble input is
passed on (to preprocessing or, renamed as upstream's BLS does, to the LLM model, which serves it
or refuses it by name), and the LLM model's results (log probs, sequence_index, token counts)
come back in the response they belong to. num_return_sequences is passed on too (upstream's BLS
drops it): each sequence's responses carry its sequence_index. The BLS's own multimodal and
draft-model inputs are refused: the pipeline deploys neither.

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
from input_checks import (  # copied beside this file by the deploy stage
    LLM_DIRECT_INPUTS,
    check_inputs,
)

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
PREPROCESSING_INPUTS = {
    "text_input": "QUERY",
    "max_tokens": "REQUEST_OUTPUT_LEN",
    "bad_words": "BAD_WORDS_DICT",
    "stop_words": "STOP_WORDS_DICT",
    "end_id": "END_ID",
    "pad_id": "PAD_ID",
    "decoder_text_input": "DECODER_QUERY",
    "embedding_bias_words": "EMBEDDING_BIAS_WORDS",
    "embedding_bias_weights": "EMBEDDING_BIAS_WEIGHTS",
    "prompt_table_extra_id": "PROMPT_TABLE_EXTRA_ID",
}
PREPROCESSED = {
    "INPUT_ID": "input_ids",
    "REQUEST_INPUT_LEN": "input_lengths",
    "REQUEST_OUTPUT_LEN": "request_output_len",
    "OUT_END_ID": "end_id",
    "OUT_PAD_ID": "pad_id",
    "STOP_WORDS_IDS": "stop_words_list",
    "BAD_WORDS_IDS": "bad_words_list",
    "EMBEDDING_BIAS": "embedding_bias",
    "OUT_PROMPT_TABLE_EXTRA_IDS": "prompt_table_extra_ids",
}
# Triton 2.51 checks required inputs by their number only: one left out can still arrive
REQUIRED_INPUTS = ("text_input", "max_tokens")
# client input -> the LLM model's (upstream's BLS's renames)
LLM_INPUTS = {client: llm for llm, client in LLM_DIRECT_INPUTS.items()}
# upstream's BLS inputs for models the pipeline does not deploy -> what is missing
NOT_DEPLOYED = {
    "image_input": "a multimodal encoder",
    "image_bytes_input": "a multimodal encoder",
    "image_url_input": "a multimodal encoder",
    "video_bytes_input": "a multimodal encoder",
    "num_draft_tokens": "a draft model (speculative decoding)",
    "use_draft_logits": "a draft model (speculative decoding)",
}
# the LLM model's results passed on as they come; output_log_probs of responses merged into one
# (accumulate_tokens waits out split characters) are joined
RESULTS = (
    "cum_log_probs",
    "output_log_probs",
    "context_logits",
    "generation_logits",
    "batch_index",
    "sequence_index",
    "kv_cache_alloc_new_blocks",
    "kv_cache_reused_blocks",
    "kv_cache_alloc_total_blocks",
    "arrival_time_ns",
    "first_scheduled_time_ns",
    "first_token_time_ns",
    "last_token_time_ns",
    "acceptance_rate",
    "total_accepted_draft_tokens",
    "total_draft_tokens",
    "num_input_tokens",
    "num_output_tokens",
)


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


def _batched(array: np.ndarray) -> np.ndarray:
    """A batch of one: the BLS's scalar inputs (reshaped) arrive without their [1]."""
    return array.reshape(1, -1) if array.ndim == 1 else array


def _results(response, names: list[str], relayed: frozenset) -> dict[str, np.ndarray]:
    """The response's results among names; "_sequence" (not passed on): its sequence index."""
    found = {}
    for name in names:
        tensor = pb_utils.get_output_tensor_by_name(response, name)
        if tensor is not None:
            found[name if name in relayed else f"_{name}"] = tensor.as_numpy()
    index = found.get("sequence_index", found.get("_sequence_index"))
    found["_sequence"] = 0 if index is None else int(index.reshape(-1)[0])
    return found


def _merged(held: list[dict]) -> dict[str, np.ndarray]:
    """The results of LLM responses sent as one: per-token log probs joined, the rest the last."""
    merged = dict(held[-1])
    steps = [results["output_log_probs"] for results in held if "output_log_probs" in results]
    if steps:
        merged["output_log_probs"] = np.concatenate(steps, axis=-1)
    return merged


def _refuse_not_deployed(inputs: dict) -> None:
    sent = [
        name
        for name in NOT_DEPLOYED
        if name in inputs
        and inputs[name].as_numpy().size
        and (name != "use_draft_logits" or inputs[name].as_numpy().any())
    ]
    if sent:
        raise pb_utils.TritonModelException(
            "tensorrt_llm_bls: "
            + "; ".join(
                f"{name} needs {NOT_DEPLOYED[name]}, which the pipeline does not deploy; leave it "
                f"out"
                for name in sent
            )
        )


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
            sender.send(flags=FINAL)  # also when cancelled: it frees the request
        except Exception as exc:  # whatever failed must reach the client and close the request
            sender.send(
                pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))), flags=FINAL
            )

    def _texts(self, request, streaming_allowed: bool, sender=None):
        """The text_output responses for one request (a list, or a generator when streaming)."""
        inputs = {
            name: tensor
            for name in (*PREPROCESSING_INPUTS, *LLM_INPUTS, *NOT_DEPLOYED)
            if (tensor := pb_utils.get_input_tensor_by_name(request, name)) is not None
        }
        missing = [name for name in REQUIRED_INPUTS if name not in inputs]
        if missing:
            raise pb_utils.TritonModelException(
                f"tensorrt_llm_bls: missing required input {' and '.join(missing)}; send it"
            )
        _refuse_not_deployed(inputs)
        try:
            check_inputs({name: t.as_numpy() for name, t in inputs.items()})
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"tensorrt_llm_bls: {exc}") from None
        stream = "stream" in inputs and bool(inputs["stream"].as_numpy().reshape(-1)[0])
        if stream and not streaming_allowed:
            raise pb_utils.TritonModelException(
                "stream=true needs the decoupled deployment (deploy.decoupled_mode=true)"
            )
        sequences = inputs.get("num_return_sequences")
        if sequences is not None and int(sequences.as_numpy().reshape(-1)[0]) > 1:
            if not self.decoupled:
                raise pb_utils.TritonModelException(
                    "tensorrt_llm_bls: num_return_sequences > 1 returns each sequence in "
                    "responses of its own, which needs the decoupled deployment "
                    "(deploy.decoupled_mode=true)"
                )
        # the results the client asked for (and sequence_index, which keeps sequences apart)
        wanted = set(request.requested_output_names())
        results = [name for name in RESULTS if name in wanted or name == "sequence_index"]
        relayed = frozenset(name for name in results if name in wanted)
        llm_inputs = self._preprocess(inputs)
        llm_inputs += [
            pb_utils.Tensor(LLM_INPUTS[name], _batched(inputs[name].as_numpy()))
            for name in LLM_INPUTS
            if name in inputs
        ]
        llm_request = pb_utils.InferenceRequest(
            model_name=self.llm_name,
            inputs=llm_inputs,
            requested_output_names=[*self.llm_outputs, *results],
            request_id=f"bls-{uuid.uuid4().hex}",  # what a `stop` request names
        )
        if not self.decoupled:
            response = _check(llm_request.exec())
            return [self._llm_response(response, _results(response, results, relayed))]
        responses = llm_request.exec(decoupled=True)
        return self._deltas(responses, stream, sender, llm_request.request_id(), results, relayed)

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

    def _deltas(self, responses, stream: bool, sender, request_id: str, results, relayed):
        # accumulate_tokens, per sequence index: [tokens so far, text sent, results unsent]
        streams: dict[int, list] = {}
        for response in responses:
            if sender.is_cancelled():
                self._stop(request_id, responses)
                return
            found = _results(_check(response), results, relayed)
            if self.llm_text:
                if pb_utils.get_output_tensor_by_name(response, "text_output") is not None:
                    yield self._llm_response(response, found)
                continue
            new = self._tokens(response)
            if new is None:
                continue  # an empty final response
            if not stream or not self.accumulate:
                yield self._text_response(new, found)
                continue
            index = found["_sequence"]
            tokens, sent_text, held = streams.setdefault(index, [[], "", []])
            tokens.extend(new.tolist())
            held.append({**found, "num_tokens": len(new)})
            text = self._decode(np.array(tokens, dtype=np.int32))
            if text.endswith("\ufffd"):
                continue  # a multi-byte character is still incomplete
            num_unsent = sum(h.pop("num_tokens") for h in held)
            yield self._string_response(text[len(sent_text) :], num_unsent, _merged(held))
            streams[index] = [tokens, text, []]

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

    def _llm_response(self, response, results: dict):
        """The client's response for one LLM response (its tokens decoded unless it has text)."""
        if not self.llm_text:
            return self._text_response(self._tokens(response), results)
        text = pb_utils.get_output_tensor_by_name(response, "text_output").as_numpy()
        length = pb_utils.get_output_tensor_by_name(response, "sequence_length").as_numpy()
        return self._string_response(
            text.reshape(-1)[0].decode(), int(length.reshape(-1)[0]), results
        )

    def _text_response(self, tokens: np.ndarray, results: dict):
        return self._string_response(self._decode(tokens), len(tokens), results)

    def _string_response(self, text: str, num_tokens: int, results: dict):
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("text_output", np.array([[text.encode()]], dtype=np.object_)),
                pb_utils.Tensor("sequence_length", np.array([[num_tokens]], np.int32)),
                *(
                    pb_utils.Tensor(name, value)
                    for name, value in results.items()
                    if not name.startswith("_")
                ),
            ]
        )
