"""postprocessing: token ids [B, beams, L] + lengths [B, beams] -> text [B * beams] (flat, as
upstream's postprocessing returns it: clients read a response's text as text_output[0]), and the
lengths passed on (OUT_SEQUENCE_LENGTH, ours: how many tokens each text stands for)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.tokenizer = AutoTokenizer.from_pretrained(
            params["tokenizer_dir"]["string_value"], legacy=False, padding_side="left"
        )
        value = params.get("skip_special_tokens", {}).get("string_value", "true").lower()
        self.skip_special_tokens = value not in ("false", "0")

    def _decode(self, request) -> list:
        tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()
        lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()
        if tokens.ndim == 2:  # [B, L]: a caller without the beam dim
            tokens, lengths = tokens[:, None, :], lengths.reshape(-1, 1)
        skip = self.skip_special_tokens
        texts = [
            self.tokenizer.decode(beam[:length], skip_special_tokens=skip).encode()
            for item, item_lengths in zip(tokens, lengths, strict=True)
            for beam, length in zip(item, item_lengths, strict=True)
        ]
        return [
            pb_utils.Tensor("OUTPUT", np.array(texts, dtype=np.object_)),
            pb_utils.Tensor("OUT_SEQUENCE_LENGTH", lengths.astype(np.int32)),
        ]

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=self._decode(request)) for request in requests
        ]
