"""The batched LoRA delta: every adapted linear runs its base GEMM once for the whole batch,
plus each token's adapter's low-rank delta, gathered by the token's slot.

Device slots: slot 0 holds no adapter (zeros, never written); slots 1..max_loras hold the
adapters the cache put there. Each adapted linear keeps its slots stacked:
    lora_a [slots, parts * R, in]   lora_b [out, slots, parts * R]
R the padded rank; a fused linear's parts (q, k, v; gate, up) are block-diagonal: part g's A
rows and B columns are [g * R, (g + 1) * R), and its B rows are its own outputs. The token ->
slot map is a static buffer (`LoraBatch.slots`) the runner fills before each forward, so a CUDA
graph replays with the slots of the step it runs.

Three paths compute the same delta. Plain PyTorch (the reference, used off CUDA): x times every
slot's A in one GEMM, each token keeping its own slot's columns, then one GEMM with every slot's
B. On CUDA, a decode-sized forward (at most lora_bgmv.MAX_TOKENS rows) runs kernels/lora_bgmv.py:
programs a token, a shrink split over `in` then an expand over output tiles, each program one
load of weights deep; a larger one runs kernels/lora_sgmv.py: tokens sorted by slot once a
forward, each slot's tokens in tiles through tl.dot (Punica's SGMV, as vLLM's lora_shrink /
lora_expand). Either way one shrink serves a fused linear's parts (q, k, v share x; so do gate
and up) and the expand adds into its fused output.
Everything a forward runs is on the device (the prepare hook too), so CUDA graphs capture it.
"""

from types import ModuleType

import torch
from torch import nn

from pipeline.engine.lora.weights import LINEAR_PARTS


class LoraBatch:
    """One forward's token -> slot map, shared by the model's adapted linears."""

    def __init__(
        self,
        num_rows: int,
        num_slots: int,
        device: torch.device,
        sgmv: ModuleType | None,
        bgmv: ModuleType | None,
    ):
        self.slots = torch.zeros(num_rows, dtype=torch.int64, device=device)
        self.num_slots = num_slots  # with slot 0
        self.sgmv, self.bgmv = sgmv, bgmv
        self._slot_ids = torch.arange(num_slots, device=device)
        self.onehot: torch.Tensor | None = None  # plain path: [T, slots] 1 at a token's slot
        self.segments: tuple[torch.Tensor, ...] | None = None  # SGMV: lora_sgmv.segments
        self.token_slots: torch.Tensor | None = None  # BGMV: [T] each token's slot

    def set_step(self, token_slots: torch.Tensor | None) -> None:
        """The next forward's slots ([T] int64; None: no token has an adapter)."""
        if token_slots is None:
            self.slots.zero_()
        else:
            self.slots[: token_slots.shape[0]].copy_(token_slots, non_blocking=True)

    def prepare(self, module: nn.Module, args: tuple) -> None:
        """The model's forward pre-hook: what every adapted linear of this forward shares
        (inside a CUDA graph's capture too, over its padded rows)."""
        num_tokens = args[0].shape[0]
        slots = self.slots[:num_tokens]
        if num_tokens > self.slots.shape[0]:  # a scoring prefill past the step limits: no adapter
            slots = self.slots.new_zeros(num_tokens)
        self.onehot = self.segments = self.token_slots = None
        if self.bgmv is not None and num_tokens <= self.bgmv.MAX_TOKENS:
            self.token_slots = slots
        elif self.sgmv is not None:
            self.segments = self.sgmv.segments(slots, self.num_slots)
        else:
            self.onehot = slots[:, None] == self._slot_ids

    def add_delta(self, y: torch.Tensor, x: torch.Tensor, linear: "LoraLinear") -> torch.Tensor:
        """y + each token's delta of `linear` (in place on the kernel paths)."""
        a, b, rank = linear.lora_a, linear.lora_b, linear.rank
        if self.token_slots is not None:
            return self.bgmv.add_lora(y, x, a, b, rank, linear.part_starts, self.token_slots)
        if self.segments is not None:
            return self.sgmv.add_lora(y, x, a, b, rank, *self.segments)
        return y + lora_delta(x, a, b, self.onehot).to(y.dtype)


def lora_delta(
    x: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, onehot: torch.Tensor
) -> torch.Tensor:
    # x [T, in]; lora_a [S, PR, in]; lora_b [out, S, PR]; onehot [T, S] bool -> [T, out]
    num_slots, width, inp = lora_a.shape
    xa = (x @ lora_a.view(-1, inp).T).view(-1, num_slots, width) * onehot[:, :, None]
    return xa.view(x.shape[0], -1) @ lora_b.view(lora_b.shape[0], -1).T


class LoraLinear(nn.Module):
    """A base linear ([T, in] -> [T, out]) plus the batch's LoRA deltas."""

    def __init__(
        self,
        base: nn.Module,
        in_features: int,
        part_sizes: list[int],
        num_slots: int,
        rank: int,
        batch: LoraBatch,
        dtype: torch.dtype,
        device: torch.device,
    ):
        super().__init__()
        self.base, self.batch, self.rank = base, batch, rank
        self.output_sizes = base.output_sizes
        self.kernel = f"{base.kernel}+lora"
        # where each part's outputs start: [q, k, v] of a qkv linear, [gate, up], or one part
        self.part_starts = [0, *torch.tensor(part_sizes).cumsum(0).tolist()]
        width = len(part_sizes) * rank
        out = sum(part_sizes)
        self.register_buffer(
            "lora_a", torch.zeros(num_slots, width, in_features, dtype=dtype, device=device)
        )
        self.register_buffer(
            "lora_b", torch.zeros(out, num_slots, width, dtype=dtype, device=device)
        )

    def load_slot(self, slot: int, parts: list[tuple[int, torch.Tensor, torch.Tensor]]) -> None:
        """Put an adapter's parts (part, A [r, in], B [out_part, r]) in a slot (zeros elsewhere:
        a part it does not adapt, ranks past its own)."""
        self.lora_a[slot].zero_()
        self.lora_b[:, slot].zero_()
        starts = self.part_starts
        for part, a, b in parts:
            cols = slice(part * self.rank, part * self.rank + a.shape[0])
            self.lora_a[slot, cols].copy_(a, non_blocking=True)
            self.lora_b[starts[part] : starts[part + 1], slot, cols].copy_(b, non_blocking=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.batch.add_delta(self.base(x), x, self)


# engine linear -> (the decoder layer's submodule, its attribute)
LINEAR_PATHS = {
    "qkv": ("attention", "qkv"),
    "dense": ("attention", "dense"),
    "gate_up": ("mlp", "gate_up"),
    "proj": ("mlp", "proj"),
}


def linear_shape(
    linear: str, hidden: int, q_local: int, kv_local: int, inter_local: int
) -> tuple[int, list[int]]:
    """(in features, each part's out features) of an engine linear on this rank."""
    return {
        "qkv": (hidden, [q_local, kv_local, kv_local]),
        "dense": (q_local, [hidden]),
        "gate_up": (hidden, [inter_local, inter_local]),
        "proj": (inter_local, [hidden]),
    }[linear]


def adapted_linears(target_modules: tuple[str, ...]) -> list[str]:
    """The engine linears with at least one targeted part."""
    return [n for n, parts in LINEAR_PARTS.items() if set(parts) & set(target_modules)]
