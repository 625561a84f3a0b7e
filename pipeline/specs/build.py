from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BuildSpec:
    max_batch_size: int = 8
    max_input_len: int = 1024
    max_seq_len: int = 2048
    max_num_tokens: int = 8192
    max_beam_width: int = 1
    tokens_per_block: int = 32
    kv_cache_type: str = "paged"
