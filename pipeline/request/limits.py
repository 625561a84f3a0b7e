"""What an engine can ever serve: fixed at load, so any thread or process can check a request."""

from dataclasses import dataclass

from pipeline.request.sampling_params import SamplingParams


@dataclass(frozen=True, slots=True)
class RequestLimits:
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int
    vocab_size: int
    block_size: int
    num_kv_blocks: int
    enable_chunked_prefill: bool

    def check(self, prompt_token_ids: list[int], params: SamplingParams) -> None:
        """Raise ValueError, naming the limit and the way out, for a request never servable."""
        num_prompt = len(prompt_token_ids)
        if num_prompt == 0:
            raise ValueError("request: the prompt is empty")
        if num_prompt > self.max_input_len:
            raise ValueError(
                f"request: prompt has {num_prompt} tokens, above the engine's "
                f"max_input_len={self.max_input_len} (shorten it or rebuild with "
                f"build.max_input_len)"
            )
        if num_prompt + params.max_tokens > self.max_seq_len:
            raise ValueError(
                f"request: prompt ({num_prompt} tokens) + max_tokens "
                f"({params.max_tokens}) exceeds the engine's max_seq_len="
                f"{self.max_seq_len}; lower max_tokens"
            )
        self._check_ids("prompt", prompt_token_ids)
        self._check_ids("stop words", [t for seq in params.stop_sequences for t in seq])
        self._check_ids("stop token ids", params.stop_token_ids)
        self._check_ids("logit_bias", [token for token, _ in params.logit_bias])
        self._check_ids("bad words", [t for seq in params.bad_sequences for t in seq])
        if params.end_id is not None and params.end_id != -1:  # -1: no end token
            self._check_ids("end_id", [params.end_id])
        needed = -(-(num_prompt + params.max_tokens - 1) // self.block_size)
        if needed > self.num_kv_blocks:
            raise ValueError(
                f"request: needs {needed} KV blocks of {self.block_size} tokens "
                f"but the cache has {self.num_kv_blocks}; "
                f"it can never fit (lower max_tokens or raise num_kv_blocks)"
            )
        if not self.enable_chunked_prefill and num_prompt > self.max_num_tokens:
            raise ValueError(
                f"request: prompt has {num_prompt} tokens, above max_num_tokens="
                f"{self.max_num_tokens} with chunked prefill off (enable it)"
            )

    def _check_ids(self, what: str, token_ids) -> None:
        bad = [t for t in token_ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(
                f"request: {what} token ids {bad[:5]} are outside the vocabulary "
                f"[0, {self.vocab_size})"
            )
