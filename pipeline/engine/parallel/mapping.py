"""Which rank holds what: rank = pp_rank * tp_size + tp_rank (TensorRT-LLM's order, as convert
writes rank<N>.safetensors)."""

from dataclasses import dataclass

import torch

from pipeline.checkpoint.sharding import pp_layers
from pipeline.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Mapping:
    tp_size: int = 1
    pp_size: int = 1
    rank: int = 0

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp_size

    @property
    def pp_rank(self) -> int:
        return self.rank // self.tp_size

    @property
    def is_driver(self) -> bool:
        return self.rank == 0

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp_size - 1

    def stage_ranks(self, pp_rank: int) -> list[int]:
        return [pp_rank * self.tp_size + t for t in range(self.tp_size)]

    def peer(self, pp_rank: int) -> int:
        """The rank of this one's tensor-parallel position in another stage."""
        return pp_rank * self.tp_size + self.tp_rank

    def layers(self, num_layers: int) -> range:
        """This stage's layers (global indices; its rank file numbers them from 0)."""
        return pp_layers(num_layers, self.pp_size, self.pp_rank)

    def local_heads(self, num_heads: int, num_kv_heads: int) -> tuple[int, int]:
        """Query and KV heads on this rank: KV heads fewer than the ranks are replicated, one a
        rank (convert's split_kv)."""
        return num_heads // self.tp_size, max(num_kv_heads // self.tp_size, 1)


SINGLE_RANK = Mapping()


def check_devices(world_size: int, device_type: str, first_index: int, num_visible: int) -> None:
    """One GPU a rank: refuse a mapping wider than the GPUs this process sees."""
    if device_type != "cuda" or world_size == 1:
        return
    if first_index + world_size > num_visible:
        raise ConfigError(
            f"engine: the checkpoint's mapping (tp_size * pp_size = {world_size} ranks, one GPU "
            f"each, from cuda:{first_index}) needs {first_index + world_size} GPUs but "
            f"{num_visible} are visible; run on a host with enough GPUs (CUDA_VISIBLE_DEVICES), "
            f"or convert again with parallel.tp_size / parallel.pp_size whose product is at "
            f"most {max(num_visible - first_index, 1)}"
        )


def rank_device(device: torch.device, rank: int) -> torch.device:
    """One GPU a rank, counted from the engine's device (cuda = cuda:0); the CPU for all."""
    if device.type != "cuda":
        return device
    return torch.device("cuda", (device.index or 0) + rank)
