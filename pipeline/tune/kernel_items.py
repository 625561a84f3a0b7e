"""The shape classes a model's engine runs each Triton kernel at: what `tune=kernels` tunes and
what a build looks up in the tuning cache. Keys are the tuples the kernel wrappers look up
(pipeline/engine/kernels/tuned_configs.py), so a tuned entry is found at run time."""

from dataclasses import dataclass

from pipeline.engine.kernels.toolchain import KERNEL_SOURCES
from pipeline.engine.kernels.tuned_configs import bucket, shape_key
from pipeline.errors import ConfigError

W8A16 = "W8A16"
INT8_DECODE_MAX_ROWS = 64  # int8_matmul.DECODE_MAX_ROWS, without importing triton


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the kernels' shapes depend on (one tensor-parallel rank's share)."""

    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str  # activations: float16 | bfloat16 | float32
    kv_dtype: str  # the KV cache: the activation dtype or float8_e4m3fn
    quant_algo: str | None = None
    tp_size: int = 1

    @classmethod
    def of(cls, model, block_size: int, dtype: str, kv_dtype: str | None = None) -> "ModelShape":
        """From an engine ModelConfig (its tp_size shards heads and the MLP)."""
        tp = model.tp_size
        return cls(
            hidden_size=model.hidden_size,
            intermediate_size=model.intermediate_size // tp,
            num_heads=model.num_heads // tp,
            num_kv_heads=max(1, model.num_kv_heads // tp),
            head_dim=model.head_dim,
            block_size=block_size,
            dtype=dtype,
            kv_dtype=kv_dtype or dtype,
            quant_algo=(model.quantization or {}).get("quant_algo"),
            tp_size=tp,
        )

    def linears(self) -> dict[str, tuple[int, int]]:
        """(N, K) of each quantized linear of a decoder layer."""
        heads, kv, d, h = self.num_heads, self.num_kv_heads, self.head_dim, self.hidden_size
        return {
            "qkv": ((heads + 2 * kv) * d, h),
            "o": (h, heads * d),
            "gate_up": (2 * self.intermediate_size, h),
            "down": (h, self.intermediate_size),
        }


@dataclass(frozen=True, slots=True)
class KernelItem:
    kernel: str
    shape: tuple  # the key the wrapper looks up
    rows: int  # rows (tokens or sequences) a timed launch runs
    label: str

    @property
    def key(self) -> str:
        return shape_key(self.shape)


def items_for(
    shape: ModelShape, decode_batch_sizes: tuple[int, ...], prompt_tokens: tuple[int, ...]
) -> list[KernelItem]:
    """Every (kernel, shape class) the engine runs at these decode batches and prompt steps."""
    s = shape
    attn = (s.dtype, s.kv_dtype, s.num_heads, s.num_kv_heads, s.head_dim, s.block_size)
    items = []
    steps = [(bucket(b), f"decode b{bucket(b)}", False) for b in decode_batch_sizes]
    steps += [(bucket(t), f"prompt {bucket(t)} tok", True) for t in prompt_tokens]
    for rows, label, is_prompt in steps:
        items.append(KernelItem("rmsnorm", (s.dtype, s.hidden_size, rows), rows, label))
        items.append(KernelItem("silu_and_mul", (s.dtype, s.intermediate_size, rows), rows, label))
        rotary = (s.dtype, s.num_heads, s.num_kv_heads, s.head_dim, rows)
        items.append(KernelItem("rotary_store_kv", rotary, rows, label))
        # decode-only steps run the paged decode kernel; steps with prompt tokens the varlen one
        attention = "varlen_attention" if is_prompt else "paged_decode_attention"
        items.append(KernelItem(attention, (*attn, rows), rows, label))
    if s.quant_algo == W8A16:
        items += _int8_items(s, decode_batch_sizes, prompt_tokens)
    return list({(i.kernel, i.key): i for i in items}.values())  # first label of each class


def _int8_items(s: ModelShape, decode_batch_sizes, prompt_tokens) -> list[KernelItem]:
    items = []
    for name, (n, k) in s.linears().items():
        for batch in decode_batch_sizes:
            if batch == 1:
                items.append(KernelItem("int8_gemv", (s.dtype, n, k), 1, f"{name} b1"))
            elif batch <= INT8_DECODE_MAX_ROWS:
                block_m = max(16, bucket(batch))
                key = (s.dtype, n, k, block_m)
                items.append(KernelItem("int8_matmul_decode", key, batch, f"{name} b{batch}"))
        if prompt_tokens:  # one config for every prompt size: tuned at the largest
            rows = max(prompt_tokens)
            key = (s.dtype, n, k)
            items.append(KernelItem("int8_matmul_prompt", key, rows, f"{name} {rows} tok"))
    return items


def select(items: list[KernelItem], kernels: tuple[str, ...]) -> list[KernelItem]:
    """The items of the named kernels (all for an empty list); an unknown name is refused."""
    unknown = sorted(set(kernels) - set(KERNEL_SOURCES))
    if unknown:
        raise ConfigError(
            f"tune.kernels.kernels: unknown kernel(s) {unknown}; known: {sorted(KERNEL_SOURCES)}"
        )
    return [i for i in items if not kernels or i.kernel in kernels]
