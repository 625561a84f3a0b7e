"""How many adapters a step may mix: no more distinct ones than the device has slots."""

from pipeline.engine.scheduling.sequence import Sequence


def lora_admits(running: list[Sequence], seq: Sequence, max_loras: int) -> bool:
    """Whether seq may join the running sequences (0 max_loras: the engine serves no adapters,
    and a sequence carries none)."""
    if not seq.lora_id:
        return True
    adapters = {s.lora_id for s in running if s.lora_id}
    return seq.lora_id in adapters or len(adapters) < max_loras
