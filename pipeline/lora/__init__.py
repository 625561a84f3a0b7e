"""LoRA adapters served over one base model: their files and checks (adapters), the engine's
settings (options). The engine's side (weights in its layout, the device cache, the batched
delta) is pipeline/engine/lora/."""
