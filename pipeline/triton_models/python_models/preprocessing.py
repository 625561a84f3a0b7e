"""preprocessing: text -> token ids, stop/bad words -> TensorRT-LLM's [2, N] word-list format,
embedding bias words and weights -> a bias over the vocabulary, as upstream's preprocessing
(docs/trtllm_reference.md, section 9.5)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from input_checks import ALLOWED, check_inputs, decode_utf8  # copied beside this file by deploy
from transformers import AutoTokenizer

# Triton 2.51 checks required inputs by their number only, so one left out can still arrive here
# (its input -> the ensemble's and the BLS's name for it)
REQUIRED = {"QUERY": "text_input", "REQUEST_OUTPUT_LEN": "max_tokens"}


def _flag(params: dict, key: str, default: bool) -> bool:
    value = params.get(key, {}).get("string_value", "").strip().lower()
    if not value or value.startswith("${"):
        return default
    return value in ("true", "1")


# this model's string inputs -> the ensemble's and the BLS's name for them
CLIENT_NAMES = {
    "QUERY": "text_input",
    "BAD_WORDS_DICT": "bad_words",
    "STOP_WORDS_DICT": "stop_words",
    "EMBEDDING_BIAS_WORDS": "embedding_bias_words",
    "DECODER_QUERY": "decoder_text_input",
}


def _text(value, name: str) -> str:
    return decode_utf8(value, f"{name} (the ensemble's {CLIENT_NAMES.get(name, name)})")


def _strings(tensor) -> list[list[str]]:
    """[B, N] bytes -> per batch item, the non-empty strings."""
    return [
        [_text(w, tensor.name()) for w in row if len(w)]
        for row in tensor.as_numpy().reshape(tensor.as_numpy().shape[0], -1)
    ]


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.tokenizer = AutoTokenizer.from_pretrained(
            params["tokenizer_dir"]["string_value"], legacy=False, padding_side="left"
        )
        self.add_special_tokens = _flag(params, "add_special_tokens", True)
        self.end_id = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        self.pad_id = self.end_id if pad is None else pad

    def _word_lists(self, words: list[list[str]]) -> np.ndarray:
        """[B, 2, N]: row 0 the concatenated ids, row 1 the cumulative end offsets (-1 padded)."""
        flat_ids, offsets = [], []
        for item in words:
            ids = [self.tokenizer.encode(w, add_special_tokens=False) for w in item]
            ids = [x for x in ids if x]
            flat_ids.append([tok for x in ids for tok in x])
            offsets.append(np.cumsum([len(x) for x in ids]).tolist())
        width = max(1, *(len(x) for x in flat_ids))
        out = np.zeros((len(words), 2, width), dtype=np.int32)
        out[:, 1, :] = -1
        for i, (ids, offs) in enumerate(zip(flat_ids, offsets, strict=True)):
            out[i, 0, : len(ids)] = ids
            out[i, 1, : len(offs)] = offs
        return out

    def _embedding_bias(self, request, batch: int) -> np.ndarray:
        """[B, vocab] float32: each word's weight added on each of its tokens; [B, 0] when no
        words are sent (no bias)."""
        words = pb_utils.get_input_tensor_by_name(request, "EMBEDDING_BIAS_WORDS")
        weights = pb_utils.get_input_tensor_by_name(request, "EMBEDDING_BIAS_WEIGHTS")
        if words is None and weights is None:
            return np.zeros((batch, 0), dtype=np.float32)
        words = [] if words is None else words.as_numpy().reshape(batch, -1)
        weights = [] if weights is None else weights.as_numpy().reshape(batch, -1)
        if len(words) != len(weights) or any(
            len(w) != len(v) for w, v in zip(words, weights, strict=True)
        ):
            raise ValueError(
                "embedding_bias_words and embedding_bias_weights must come together, one weight "
                "a word; send both with the same length"
            )
        bias = np.zeros((batch, len(self.tokenizer)), dtype=np.float32)
        for i, (item_words, item_weights) in enumerate(zip(words, weights, strict=True)):
            for word, weight in zip(item_words, item_weights, strict=True):
                if not np.isfinite(weight):
                    raise ValueError(f"embedding_bias_weights: {weight} is not a finite number")
                text = _text(word, "EMBEDDING_BIAS_WORDS")
                for token in self.tokenizer.encode(text, add_special_tokens=False):
                    bias[i, token] += weight
        return bias

    def _id_or_default(self, request, name: str, default: int, batch: int) -> np.ndarray:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is None:
            return np.full((batch, 1), default, dtype=np.int32)
        return tensor.as_numpy().astype(np.int32).reshape(batch, 1)

    def _decoder_prompt(self, request, batch: int, pad_ids: np.ndarray):
        """An encoder-decoder model's decoder prompt ([B, N] ids, [B, 1] lengths), as upstream's
        preprocessing makes it: DECODER_QUERY tokenized, else one pad id. A decoder-only
        `tensorrt_llm` takes and ignores it, as the tensorrtllm backend does."""
        query = pb_utils.get_input_tensor_by_name(request, "DECODER_QUERY")
        if query is None:
            return pad_ids.copy(), np.ones((batch, 1), np.int32)
        encoded = [
            self.tokenizer.encode(_text(q, "DECODER_QUERY"), add_special_tokens=False) or [pad]
            for q, pad in zip(query.as_numpy().reshape(-1), pad_ids[:, 0], strict=True)
        ]
        ids = np.full((batch, max(len(x) for x in encoded)), pad_ids[0, 0], np.int32)
        for i, x in enumerate(encoded):
            ids[i, : len(x)] = x
        return ids, np.array([[len(x)] for x in encoded], np.int32)

    def _preprocess(self, request):
        missing = [
            f"{name} (the ensemble's {outer})"
            for name, outer in REQUIRED.items()
            if pb_utils.get_input_tensor_by_name(request, name) is None
        ]
        if missing:
            raise ValueError(f"missing required input {' and '.join(missing)}; send it")
        sent = {t.name(): t.as_numpy() for t in request.inputs() if t.name() in ALLOWED}
        check_inputs(sent)
        queries = pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy()
        batch = queries.shape[0]
        prompts = [_text(q, "QUERY") for q in queries.reshape(-1)]
        encoded = [
            self.tokenizer.encode(p, add_special_tokens=self.add_special_tokens) for p in prompts
        ]
        if any(len(ids) == 0 for ids in encoded):
            raise ValueError("text_input tokenizes to no tokens; send a non-empty prompt")
        end_ids = self._id_or_default(request, "END_ID", self.end_id, batch)
        pad_ids = self._id_or_default(request, "PAD_ID", self.pad_id, batch)
        width = max(len(ids) for ids in encoded)
        input_ids = np.full((batch, width), pad_ids[0, 0], dtype=np.int32)
        for i, ids in enumerate(encoded):
            input_ids[i, : len(ids)] = ids
        words = {}
        for name in ("BAD_WORDS_DICT", "STOP_WORDS_DICT"):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            words[name] = (
                np.zeros((batch, 2, 0), dtype=np.int32)
                if tensor is None
                else self._word_lists(_strings(tensor))
            )
        output_len = pb_utils.get_input_tensor_by_name(request, "REQUEST_OUTPUT_LEN").as_numpy()
        decoder_ids, decoder_lengths = self._decoder_prompt(request, batch, pad_ids)
        # like the bias, [B, 0] (none) unless sent: upstream's, on the prompt-table ids (those
        # past the vocabulary), 0 elsewhere
        extra_id = pb_utils.get_input_tensor_by_name(request, "PROMPT_TABLE_EXTRA_ID")
        extra_ids = np.zeros((batch, 0), dtype=np.uint64)
        if extra_id is not None:
            values = extra_id.as_numpy().astype(np.uint64).reshape(batch, -1)[:, :1]
            extra_ids = np.where(input_ids >= len(self.tokenizer), values, np.uint64(0))
        bias = self._embedding_bias(request, batch)
        return [  # upstream's order
            pb_utils.Tensor("INPUT_ID", input_ids),
            pb_utils.Tensor(
                "REQUEST_INPUT_LEN", np.array([[len(ids)] for ids in encoded], dtype=np.int32)
            ),
            pb_utils.Tensor("DECODER_INPUT_ID", decoder_ids),
            pb_utils.Tensor("REQUEST_DECODER_INPUT_LEN", decoder_lengths),
            pb_utils.Tensor("BAD_WORDS_IDS", words["BAD_WORDS_DICT"]),
            pb_utils.Tensor("STOP_WORDS_IDS", words["STOP_WORDS_DICT"]),
            pb_utils.Tensor("EMBEDDING_BIAS", bias),
            pb_utils.Tensor("REQUEST_OUTPUT_LEN", output_len.astype(np.int32).reshape(batch, 1)),
            pb_utils.Tensor("OUT_END_ID", end_ids),
            pb_utils.Tensor("OUT_PAD_ID", pad_ids),
            pb_utils.Tensor("OUT_PROMPT_TABLE_EXTRA_IDS", extra_ids),
        ]

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(
                    pb_utils.InferenceResponse(output_tensors=self._preprocess(request))
                )
            except (ValueError, UnicodeDecodeError) as exc:
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(f"preprocessing: {exc}"))
                )
        return responses
