"""Adapters by name, their host weights, and the device slots they run from.

Owned by the model runner. Every adapter found in the adapter dir at start is read, checked and
converted into host memory (pinned on CUDA); a name not known yet makes the manager read the
dir again, so an adapter copied into a running server's dir is served without a restart. A
name keeps its id for the engine's life (a changed adapter needs a new name).

Device slots are an LRU cache over the host copies: a launch's adapters are put in slots before
it is packed (a copy queued on the stream, after the launches that read the slot before), and
the least recently used adapter not in the launch gives up its slot. The scheduler admits no
more distinct adapters than there are slots (lora_admits), so a launch always fits.

Tensor- and pipeline-parallel: every rank holds its own shards of its stage's layers
(weights.py) and the same slots. Rank 0 alone picks the slots; the adapters it puts in slots go
to the other ranks ahead of the launch (take_loads -> load_slots, by task id), so each rank fills
the same slot with its shards before the forward that reads it.
"""

import logging
import time
from collections import OrderedDict

import numpy as np
import torch
from torch import nn

from pipeline.engine import kernels
from pipeline.engine.engine_config import EngineConfig, ModelConfig
from pipeline.engine.lora.layer import (
    LINEAR_PATHS,
    LoraBatch,
    LoraLinear,
    adapted_linears,
    linear_shape,
)
from pipeline.engine.lora.weights import AdapterWeights, load_adapter
from pipeline.engine.parallel.mapping import Mapping
from pipeline.errors import ConfigError
from pipeline.lora.adapters import adapter_dirs, read_adapter, task_id
from pipeline.lora.options import LoraOptions

logger = logging.getLogger(__name__)


class UnknownAdapter(ValueError):
    """A request names an adapter the engine does not have (nor its adapter dir)."""


class LoraManager:
    def __init__(
        self,
        options: LoraOptions,
        model: nn.Module,
        cfg: ModelConfig,
        mapping: Mapping,
        dtype: torch.dtype,
        device: torch.device,
        num_rows: int,
    ):
        quant = cfg.quantization.get("quant_algo")
        if quant not in (None, "W8A16", "W4A16", "W4A16_AWQ"):
            raise ConfigError(
                f"lora: the torch engine adapts dense or weight-only quantized linears, not "
                f"quant_algo={quant} (its linears take quantized inputs); use quant=none or a "
                f"weight-only quant"
            )
        self.options, self.cfg, self.mapping = options, cfg, mapping
        self.dtype, self.device = dtype, device
        num_slots = options.max_loras + 1
        self.batch = LoraBatch(
            num_rows,
            num_slots,
            device,
            kernels.load("lora_sgmv", device),
            kernels.load("lora_bgmv", device),
        )
        self.layers = self._attach(model, num_slots)
        model.register_forward_pre_hook(self.batch.prepare)
        self.ids: dict[str, int] = {}
        self.adapters: dict[int, AdapterWeights] = {}
        self._by_task: dict[int, int] = {}  # task id (crc32 of the name) -> adapter id
        self.load_s: dict[str, float] = {}  # each adapter's read + check + convert time
        self._slot_of: OrderedDict[int, int] = OrderedDict()  # adapter id -> slot, LRU first
        self._free_slots = list(range(options.max_loras, 0, -1))
        # (slot, task id) of the adapters slots_for put in slots since the last take_loads
        self._loads: list[tuple[int, int]] = []
        self.refresh()

    def _attach(self, model: nn.Module, num_slots: int) -> list[dict[str, LoraLinear]]:
        cfg, tp = self.cfg, self.mapping.tp_size
        heads, kv_heads = self.mapping.local_heads(cfg.num_heads, cfg.num_kv_heads)
        sizes = (cfg.hidden_size, heads * cfg.head_dim, kv_heads * cfg.head_dim)
        inter_local = cfg.intermediate_size // tp
        rank = self.options.padded_rank
        layers = []
        for layer in model.layers:
            wrapped = {}
            for linear in adapted_linears(self.options.target_modules):
                owner_name, attr = LINEAR_PATHS[linear]
                owner = getattr(layer, owner_name)
                size, parts = linear_shape(linear, *sizes, inter_local)
                wrapped[linear] = LoraLinear(
                    getattr(owner, attr),
                    size,
                    parts,
                    num_slots,
                    rank,
                    self.batch,
                    self.dtype,
                    self.device,
                )
                setattr(owner, attr, wrapped[linear])
            layers.append(wrapped)
        return layers

    def names(self) -> list[str]:
        return sorted(self.ids)

    def refresh(self) -> None:
        """Read the adapters the dir has that are not known yet."""
        for name, path in adapter_dirs(self.options.adapter_dir).items():
            if name in self.ids:
                continue
            start = time.perf_counter()
            info = read_adapter(path, name, self.options.max_rank)
            weights = load_adapter(
                info, self.cfg, self.mapping, self.dtype, self.options.target_modules
            )
            if self.device.type == "cuda":  # copies into a slot run without the host
                for layer in weights.layers:
                    for parts in layer.values():
                        parts[:] = [(g, a.pin_memory(), b.pin_memory()) for g, a, b in parts]
            adapter_id = len(self.ids) + 1  # 0: no adapter
            self.ids[name], self.adapters[adapter_id] = adapter_id, weights
            self._by_task[task_id(name)] = adapter_id
            self.load_s[name] = time.perf_counter() - start
            logger.info(
                "lora adapter %r: rank %d, %.1f MiB, read in %.2f s",
                name,
                info.rank,
                weights.nbytes / 2**20,
                self.load_s[name],
            )

    def resolve(self, name: str | None) -> int:
        """The id of adapter `name` (0 for None: the base model alone)."""
        if name is None:
            return 0
        if name not in self.ids:
            self.refresh()
        if name not in self.ids:
            known = ", ".join(self.names()) or "none"
            raise UnknownAdapter(
                f"lora adapter {name!r} is unknown (known: {known}); copy it into "
                f"{self.options.adapter_dir} or pick a known one"
            )
        return self.ids[name]

    def slots_for(self, lora_ids: np.ndarray) -> np.ndarray:
        """Each row's device slot ([B] adapter ids -> [B] slots, 0 for none), putting the
        adapters not in a slot into one."""
        wanted = [int(i) for i in np.unique(lora_ids) if i]
        if len(wanted) > self.options.max_loras:
            raise RuntimeError(f"lora: a launch of {len(wanted)} adapters exceeds the slots")
        for adapter_id in wanted:
            if adapter_id in self._slot_of:
                self._slot_of.move_to_end(adapter_id)
                continue
            if not self._free_slots:  # the least recently used adapter this launch does not need
                victim = next(i for i in self._slot_of if i not in wanted)
                self._free_slots.append(self._slot_of.pop(victim))
            slot = self._free_slots[-1]
            self._load(slot, self.adapters[adapter_id])
            if self.mapping.world_size > 1:
                self._loads.append((slot, task_id(self.adapters[adapter_id].info.name)))
            self._slot_of[adapter_id] = self._free_slots.pop()
        table = np.zeros(max(self.ids.values(), default=0) + 1, np.int64)
        for adapter_id, slot in self._slot_of.items():
            table[adapter_id] = slot
        return table[lora_ids]

    def take_loads(self) -> np.ndarray | None:
        """The slot loads since the last call as [n, 2] (slot, task id), for the other ranks
        (each puts its own layers' shards in the same slots); None: none."""
        loads, self._loads = self._loads, []
        return np.array(loads, np.int64) if loads else None

    def load_slots(self, loads: np.ndarray) -> None:
        """Another rank: rank 0's slot loads (take_loads), by task id, since adapter ids
        follow each rank's reads of the adapter dir."""
        for slot, lora_task_id in loads.tolist():
            if lora_task_id not in self._by_task:
                self.refresh()
            self._load(slot, self.adapters[self._by_task[lora_task_id]])

    def _load(self, slot: int, weights: AdapterWeights) -> None:
        for linears, parts_of in zip(self.layers, weights.layers, strict=True):
            for linear, module in linears.items():
                module.load_slot(slot, parts_of.get(linear, []))


def attach_lora(
    config: EngineConfig, model: nn.Module, mapping: Mapping, device: torch.device
) -> LoraManager | None:
    """The engine's adapters over `model` (its linears wrapped), or None without lora_dir."""
    if config.lora is None:
        return None
    with kernels.plain_pytorch(not config.triton_kernels or config.compile):
        num_rows = max(config.max_batch_size, config.max_num_tokens)
        return LoraManager(
            config.lora, model, config.model, mapping, config.dtype, device, num_rows
        )
