"""The collectives a tensor-parallel model runs: all-reduce after row-parallel linears and the
vocab-parallel embedding, all-gather of the vocab-parallel logits, and the sampled tokens from
the driver. With one rank every call is the identity, so a TP=1 model runs no collective.

All-reduce: NCCL (through torch.distributed: in CUDA graphs when the model is captured), or with
all_reduce=auto / symm_mem, for messages up to ONE_SHOT_MAX_BYTES, PyTorch's symmetric-memory
one-shot all-reduce (each GPU reads its peers' buffers over NVLink and sums: one kernel, no NCCL
protocol round trips), taken when it matches NCCL's sum at start, eagerly and in a CUDA graph, on
every rank of the group."""

import logging

import torch
import torch.distributed as dist
from packaging.version import Version

logger = logging.getLogger(__name__)

ALL_REDUCE_CHOICES = ("auto", "nccl", "symm_mem")
# the one-shot's symmetric buffer; decode messages are rows x hidden (8 KiB a row at 4096 bf16)
ONE_SHOT_MAX_BYTES = 2 << 20


class SymmMemAllReduce:
    """One-shot all-reduce through a symmetric-memory buffer of max_bytes (torch.ops.symm_mem)."""

    def __init__(self, group: dist.ProcessGroup, max_bytes: int, dtype: torch.dtype, device):
        from torch.distributed import _symmetric_memory as symm_mem

        self.group_name = group.group_name
        if Version(torch.__version__.split("+")[0]) < Version("2.9"):  # since: every group
            symm_mem.enable_symm_mem_for_group(self.group_name)
        self.max_numel = max_bytes // dtype.itemsize
        self.dtype = dtype
        self.buffer = symm_mem.empty(self.max_numel, dtype=dtype, device=device)
        symm_mem.rendezvous(self.buffer, self.group_name)

    def fits(self, x: torch.Tensor) -> bool:
        return x.dtype == self.dtype and x.numel() <= self.max_numel

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # the op wants the symmetric buffer in the input's shape (its first numel elements)
        staging = self.buffer[: x.numel()].view(x.shape)
        return torch.ops.symm_mem.one_shot_all_reduce_copy(
            staging, x.contiguous(), "sum", self.group_name
        )


def _check_one_shot(one_shot: SymmMemAllReduce, group, dtype: torch.dtype, device) -> None:
    """Its sum equals NCCL's, eagerly and replayed from a CUDA graph (the engine captures it)."""
    x = torch.randn(4, 1024, device=device).to(dtype)
    expected = x.clone()
    dist.all_reduce(expected, group=group)
    if not torch.allclose(one_shot(x), expected, rtol=1e-2, atol=1e-2):  # summed in its order
        raise RuntimeError("its sum differs from NCCL's")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = one_shot(x)
    graph.replay()
    if not torch.allclose(out, expected, rtol=1e-2, atol=1e-2):
        raise RuntimeError("its sum differs from NCCL's in a CUDA graph")


class TensorParallel:
    def __init__(self, size: int = 1, rank: int = 0, group=None, src_rank: int = 0):
        self.size, self.rank, self.group = size, rank, group
        self.src_rank = src_rank  # the global rank that sends sampled tokens (the driver)
        self.is_nccl = group is not None and dist.get_backend(group) == "nccl"
        self.one_shot: SymmMemAllReduce | None = None

    def use_symm_mem(self, choice: str, dtype: torch.dtype, device: torch.device) -> str:
        """Set up the one-shot all-reduce when `choice` asks for it (auto: where it works);
        returns what all-reduce runs."""
        if self.size == 1:
            return "none"
        if choice == "nccl" or not self.is_nccl:
            return "nccl" if self.is_nccl else dist.get_backend(self.group)
        error = None
        try:
            one_shot = SymmMemAllReduce(self.group, ONE_SHOT_MAX_BYTES, dtype, device)
            _check_one_shot(one_shot, self.group, dtype, device)
        except Exception as exc:  # noqa: BLE001 - any failure: NCCL, said why
            error = exc
        works = torch.tensor([error is None], dtype=torch.int32, device=device)
        dist.all_reduce(works, op=dist.ReduceOp.MIN, group=self.group)  # all ranks, or none
        if not works.item():
            exc = error or RuntimeError("it failed on another rank")
            if choice == "symm_mem":
                raise RuntimeError(
                    f"engine: all_reduce=symm_mem does not run here ({exc!r}); use "
                    f"all_reduce=nccl or auto"
                ) from exc
            logger.warning("symmetric-memory all-reduce unavailable (%r): NCCL", exc)
            return "nccl"
        self.one_shot = one_shot
        return f"symm_mem one-shot up to {ONE_SHOT_MAX_BYTES >> 10} KiB, nccl above"

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        # [..] partial sums -> [..] the sum over the group
        if self.size == 1:
            return x
        if self.one_shot is not None and self.one_shot.fits(x):
            return self.one_shot(x)
        dist.all_reduce(x, group=self.group)
        return x

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        # [rows, cols] on each rank -> [rows, size * cols], rank-major along the last dim
        if self.size == 1:
            return x
        x = x.contiguous()
        if self.is_nccl:
            out = x.new_empty(self.size * x.shape[0], x.shape[1])
            dist.all_gather_into_tensor(out, x, group=self.group)
            return out.view(self.size, *x.shape).permute(1, 0, 2).reshape(x.shape[0], -1)
        parts = [torch.empty_like(x) for _ in range(self.size)]
        dist.all_gather(parts, x, group=self.group)
        return torch.cat(parts, dim=-1)

    def broadcast(self, t: torch.Tensor) -> torch.Tensor:
        """The driver's t on every rank of the group (t: its buffer elsewhere)."""
        if self.size > 1:
            dist.broadcast(t, src=self.src_rank, group=self.group)
        return t


SINGLE = TensorParallel()
