"""A decoder layer's linear weights packed into one flat byte buffer, and views of them.

Streamed layers keep their linears' tensors (weights, scales, packed layouts) in a host buffer
and run from views of a device staging buffer that the same bytes are copied into before the
layer runs: one copy a layer. Norm weights and everything outside the linears stay resident (a
few KB a layer). Rebinding goes through `tensor.data`, so every reference to a tensor (an FP8
activation scale the norm before it also holds) sees the staged bytes.
"""

from dataclasses import dataclass

import torch
from torch import nn

ALIGN = 256  # bytes: every view starts aligned for any dtype and for vectorized kernels


@dataclass(frozen=True, slots=True)
class Slot:
    """One tensor inside a layer's buffer: its byte offset, shape, strides and dtype."""

    tensor: torch.Tensor  # the module's own tensor object, rebound in place
    offset: int
    num_bytes: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype


def linear_tensors(layer: nn.Module) -> list[torch.Tensor]:
    """The distinct parameters and buffers of a layer's linear modules (those with
    `output_sizes`, as layers/linear.py defines them), in module order."""
    seen, out = set(), []
    for module in layer.modules():
        if not hasattr(module, "output_sizes"):
            continue
        for tensor in (*module._parameters.values(), *module._buffers.values()):
            if tensor is not None and id(tensor) not in seen:
                seen.add(id(tensor))
                out.append(tensor)
    return out


def _span_bytes(tensor: torch.Tensor) -> int:
    # the storage a view with these strides reaches (equal to nbytes when contiguous)
    if tensor.numel() == 0:
        return 0
    sizes, strides = tensor.shape, tensor.stride()
    elems = 1 + sum((size - 1) * stride for size, stride in zip(sizes, strides, strict=True))
    return elems * tensor.element_size()


def layout(tensors: list[torch.Tensor]) -> tuple[list[Slot], int]:
    """Slots for the tensors, back to back at ALIGN boundaries, and the buffer's size."""
    slots, offset = [], 0
    for tensor in tensors:
        num_bytes = _span_bytes(tensor)
        slots.append(
            Slot(tensor, offset, num_bytes, tuple(tensor.shape), tensor.stride(), tensor.dtype)
        )
        offset += -(-num_bytes // ALIGN) * ALIGN
    return slots, offset


def view(buffer: torch.Tensor, slot: Slot) -> torch.Tensor:
    """The slot's tensor as a view of a uint8 buffer."""
    raw = buffer[slot.offset : slot.offset + slot.num_bytes]
    return raw.view(slot.dtype).as_strided(slot.shape, slot.stride)


def pack(slots: list[Slot], buffer: torch.Tensor) -> None:
    """Copy each slot's tensor into the buffer and rebind it to its view there (the old
    storage is freed once nothing else holds it)."""
    for slot in slots:
        target = view(buffer, slot)
        target.copy_(slot.tensor)
        slot.tensor.data = target


def rebind(slots: list[Slot], buffer: torch.Tensor) -> None:
    """Point each slot's tensor at its view of another buffer of the same layout."""
    for slot in slots:
        slot.tensor.data = view(buffer, slot)


def host_buffer(num_bytes: int, device: torch.device) -> torch.Tensor:
    """A host byte buffer the device copies from asynchronously: pinned for a CUDA device."""
    return torch.empty(num_bytes, dtype=torch.uint8, pin_memory=device.type == "cuda")
