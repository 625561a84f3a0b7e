"""The model's layers (attention, linear, norms, rotary, sampler, penalties) and the step's
BatchMetadata that attention reads: weights only, the KV cache comes in as an argument."""
