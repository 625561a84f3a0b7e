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
drops it): each sequence's responses carry its sequence_index. Its own multimodal inputs are
refused, and num_draft_tokens unless a draft model is deployed (draft_target.py).

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
from bls_names import (  # copied beside this file by the deploy stage, as input_checks
    NOT_DEPLOYED,
    PREPROCESSED,
    PREPROCESSING_INPUTS,
    RESULTS,
)
from draft_target import DraftTarget
from input_checks import LLM_DIRECT_INPUTS, check_inputs

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
# Triton 2.51 checks required inputs by their number only: one left out can still arrive
REQUIRED_INPUTS = ("text_input", "max_tokens")
# client input -> the LLM model's (upstream's BLS's renames)
LLM_INPUTS = {client: llm for llm, client in LLM_DIRECT_INPUTS.items()}


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


def _with_batch_index(response, index: int):
    """response with its prompt's batch_index, in upstream's place among the outputs."""
    tensors = response.output_tensors()
    at = next(
        (i for i, t in enumerate(tensors) if t.name() in RESULTS[RESULTS.index("batch_index") :]),
        len(tensors) - 1,  # before sequence_length (ours, last)
    )
    tensors.insert(at, pb_utils.Tensor("batch_index", np.array([[index]], np.int32)))
    return pb_utils.InferenceResponse(output_tensors=tensors)


def _refuse_not_deployed(inputs: dict, has_draft: bool) -> None:
    sent = [
        name
        for name in NOT_DEPLOYED
        if name in inputs
        and (name != "num_draft_tokens" or not has_draft)
        and inputs[name].size
        and (name != "use_draft_logits" or inputs[name].any())
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
        draft = _param(params, "tensorrt_llm_draft_model_name", "")
        limits = [int(_param(params, key, "0")) for key in ("num_draft_tokens", "max_draft_len")]
        self.draft = DraftTarget(draft, self.llm_name, *limits) if draft else None

    def execute(self, requests):
        if not self.decoupled:
            return [self._unary(request) for request in requests]
        for request in requests:
            threading.Thread(target=self._stream, args=(request,), daemon=True).start()
        return None

    def _unary(self, request):
        try:
            prompts = self._prompts(request)
            if len(prompts) > 1:
                raise pb_utils.TritonModelException(
                    f"tensorrt_llm_bls: {len(prompts)} prompts in one request are answered in "
                    f"responses of their own (batch_index), which needs the decoupled "
                    f"deployment (deploy.decoupled_mode=true); send one prompt per request"
                )
            wanted = set(request.requested_output_names())
            return self._texts(prompts[0], wanted, streaming_allowed=False)[-1]
        except pb_utils.TritonModelException as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))

    def _stream(self, request):
        sender = request.get_response_sender()
        try:
            prompts = self._prompts(request)
            wanted = set(request.requested_output_names())
            if len(prompts) == 1:
                for response in self._texts(prompts[0], wanted, True, sender):
                    sender.send(response)
            else:
                self._batch(prompts, wanted, sender)
            sender.send(flags=FINAL)  # also when cancelled: it frees the request
        except Exception as exc:  # whatever failed must reach the client and close the request
            sender.send(
                pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))), flags=FINAL
            )

    def _batch(self, prompts: list[dict], wanted: set, sender) -> None:
        """Several prompts in one request, as upstream's BLS serves them: each in flight at once
        (a thread each), its responses tagged with its batch_index; the first error fails the
        request once every prompt is done."""
        lock, errors = threading.Lock(), []

        def run(index: int, prompt: dict) -> None:
            try:
                for response in self._texts(prompt, wanted, True, sender):
                    if "batch_index" in wanted:
                        response = _with_batch_index(response, index)
                    with lock:
                        sender.send(response)
            except Exception as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=run, args=(index, prompt), daemon=True)
            for index, prompt in enumerate(prompts)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def _prompts(self, request) -> list[dict[str, np.ndarray]]:
        """The request's inputs, one dict per prompt of its batch (its rows of each input)."""
        inputs = {
            name: tensor.as_numpy()
            for name in (*PREPROCESSING_INPUTS, *LLM_INPUTS, *NOT_DEPLOYED)
            if (tensor := pb_utils.get_input_tensor_by_name(request, name)) is not None
        }
        missing = [name for name in REQUIRED_INPUTS if name not in inputs]
        if missing:
            raise pb_utils.TritonModelException(
                f"tensorrt_llm_bls: missing required input {' and '.join(missing)}; send it"
            )
        size = inputs["text_input"].shape[0] if inputs["text_input"].ndim > 1 else 1
        if size == 1:
            return [inputs]
        return [
            {name: value[i : i + 1] if value.ndim > 1 else value for name, value in inputs.items()}
            for i in range(size)
        ]

    def _texts(self, inputs: dict, wanted: set, streaming_allowed: bool, sender=None):
        """The text_output responses for one prompt (a list, or a generator when streaming)."""
        _refuse_not_deployed(inputs, self.draft is not None)
        try:
            check_inputs(inputs)
            num_drafts = self.draft.num_drafts(inputs.get("num_draft_tokens")) if self.draft else 0
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"tensorrt_llm_bls: {exc}") from None
        stream = "stream" in inputs and bool(inputs["stream"].reshape(-1)[0])
        if stream and not streaming_allowed:
            raise pb_utils.TritonModelException(
                "stream=true needs the decoupled deployment (deploy.decoupled_mode=true)"
            )
        sequences = inputs.get("num_return_sequences")
        if sequences is not None and int(sequences.reshape(-1)[0]) > 1:
            if not self.decoupled:
                raise pb_utils.TritonModelException(
                    "tensorrt_llm_bls: num_return_sequences > 1 returns each sequence in "
                    "responses of its own, which needs the decoupled deployment "
                    "(deploy.decoupled_mode=true)"
                )
        # the results the client asked for (and sequence_index, which keeps sequences apart);
        # batch_index is the BLS's own: it sends the LLM model one prompt a request
        results = [
            name
            for name in RESULTS
            if (name in wanted and name != "batch_index") or name == "sequence_index"
        ]
        relayed = frozenset(name for name in results if name in wanted)
        llm_inputs = self._preprocess(inputs)
        llm_inputs += [
            pb_utils.Tensor(LLM_INPUTS[name], _batched(inputs[name]))
            for name in LLM_INPUTS
            if name in inputs
        ]
        if num_drafts:  # draft-target rounds, one response
            base = {tensor.name(): tensor.as_numpy() for tensor in llm_inputs}
            tokens, counts = self.draft.serve(base, num_drafts, self._round)
            found = {name: value for name, value in counts.items() if name in relayed}
            return [self._text_response(np.array(tokens, np.int32), found)]
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

    def _round(self, model: str, inputs: dict) -> list[int]:
        """A draft-target round's request to one model: the tokens it generated."""
        tensors = [pb_utils.Tensor(name, value) for name, value in inputs.items()]
        request = pb_utils.InferenceRequest(
            model_name=model,
            inputs=tensors,
            requested_output_names=["output_ids", "sequence_length"],
        )
        responses = request.exec(decoupled=True) if self.decoupled else [request.exec()]
        found = [self._tokens(_check(response)) for response in responses]
        return [int(t) for new in found if new is not None for t in new]

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
                pb_utils.Tensor(PREPROCESSING_INPUTS[name], inputs[name])
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
        if length.size > 1:  # beam search: every beam's text, flat, as upstream's BLS sends it
            texts = [t.decode() for t in text.reshape(-1)]
            return self._string_response(texts, length.reshape(1, -1), results)
        return self._string_response(
            text.reshape(-1)[0].decode(), int(length.reshape(-1)[0]), results
        )

    def _text_response(self, tokens: np.ndarray, results: dict):
        return self._string_response(self._decode(tokens), len(tokens), results)

    def _string_response(self, text, num_tokens, results: dict):
        """Upstream's order: text_output (flat, as upstream's BLS returns it), the LLM model's
        results; then sequence_length (ours). text / num_tokens: a str and an int, or a beam
        search's texts and lengths [1, beams]."""
        texts = [text] if isinstance(text, str) else text
        lengths = num_tokens if isinstance(num_tokens, np.ndarray) else [[num_tokens]]
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("text_output", np.array([t.encode() for t in texts], np.object_)),
                *(
                    pb_utils.Tensor(name, results[name])
                    for name in RESULTS
                    if name in results and not name.startswith("_")
                ),
                pb_utils.Tensor("sequence_length", np.asarray(lengths, np.int32)),
            ]
        )
