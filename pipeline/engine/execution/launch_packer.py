"""A launch's inputs, packed on the host and unpacked on every rank's device.

The driver packs the launch's micro-batches (one unless pipeline-parallel) with numpy into one
pinned buffer, copies it to the device in one copy and sends it to the other ranks; every rank
unpacks the same buffer into the micro-batches' StepInputs."""

import numpy as np
import torch

from pipeline.engine.engine_config import EngineConfig
from pipeline.engine.execution.host_buffers import PinnedRing
from pipeline.engine.execution.launch_channel import LAUNCH, LORA
from pipeline.engine.execution.launch_schedule import micro_batches, split_micro_batches
from pipeline.engine.execution.rank_groups import RankGroups
from pipeline.engine.execution.step_inputs import (
    PackedStep,
    StepHeader,
    StepInputs,
    micro_batch,
    pack_step,
    unpack_step,
    with_verify_rows,
)
from pipeline.engine.lora.manager import LoraManager
from pipeline.engine.parallel.mapping import Mapping
from pipeline.engine.scheduling.scheduler_output import SchedulerOutput


class LaunchPacker:
    def __init__(
        self,
        config: EngineConfig,
        mapping: Mapping,
        device: torch.device,
        ranks: RankGroups | None,
        lora: LoraManager | None,
        scratch_slot: int,
        max_scheduler_steps: int,
    ):
        self.mapping, self.device, self.ranks, self.lora = mapping, device, ranks, lora
        self.block_size, self.scratch_slot = config.block_size, scratch_slot
        self._ring = None
        if device.type == "cuda":
            bs, ahead = config.max_batch_size, max_scheduler_steps - 1
            max_blocks = -(-config.max_seq_len // config.block_size)
            # the first step's parts, then the steps ahead's (positions, slots, context lens x
            # ahead; query starts; block tables)
            self._ring = PinnedRing(
                4 * config.max_num_tokens
                + bs * (max_blocks + 4)
                + bs * (3 * ahead + max_blocks + 1)
                + 1
            )

    def pack(
        self, batch: SchedulerOutput, num_steps: int, last_sampled: torch.Tensor | None
    ) -> tuple[list[PackedStep], list[StepInputs]]:
        """The launch's micro-batches packed, sent to the device (and to the other ranks) in one
        copy, and unpacked there. last_sampled: the last launched step's tokens, which this
        launch's first step may read as inputs."""
        num_last = None if last_sampled is None else last_sampled.shape[0]
        slices = [slice(0, len(batch))]
        if self.mapping.pp_size > 1:
            tokens = batch.num_tokens.tolist()
            slices = split_micro_batches(tokens, micro_batches(sum(tokens), self.mapping.pp_size))
        lora = None if batch.lora_ids is None else self.lora.slots_for(batch.lora_ids)
        loads = None if lora is None or self.ranks is None else self.lora.take_loads()
        if loads is not None:  # the other ranks fill the same slots before the launch
            self.ranks.channel.send(LORA, [], torch.from_numpy(loads.reshape(-1)))
        packed = [
            pack_step(
                micro_batch(batch, part),
                num_steps,
                self.block_size,
                self.scratch_slot,
                num_last,
                None if lora is None else lora[part],
            )
            for part in slices
        ]
        if batch.draft_token_ids is not None:  # speculative decoding: logits at every draft
            packed = [
                with_verify_rows(step, micro_batch(batch, part))
                for step, part in zip(packed, slices, strict=True)
            ]
        parts = [p for step in packed for p in step.parts]
        num = sum(len(p) for p in parts)
        # unsafe: an empty tuple is a float64 array to numpy; every value is an integer
        if self._ring is not None:
            host = self._ring.take(num)
            np.concatenate(parts, out=host.numpy(), casting="unsafe")
            body = host.to(self.device, non_blocking=True)
            self._ring.copied()
        else:
            host = body = torch.from_numpy(np.concatenate(parts, dtype=np.int64, casting="unsafe"))
        headers = [step.header for step in packed]
        if self.ranks is not None:
            self.ranks.channel.send(LAUNCH, headers, host)
        return packed, self.unpack(headers, body, last_sampled)

    def unpack(
        self, headers: list[StepHeader], body: torch.Tensor, last_sampled: torch.Tensor | None
    ) -> list[StepInputs]:
        sizes = [sum(h.part_sizes()) for h in headers]
        embeds = self.mapping.is_first_stage
        return [
            unpack_step(part, h, last_sampled, embeds)
            for part, h in zip(body.split(sizes), headers, strict=True)
        ]
