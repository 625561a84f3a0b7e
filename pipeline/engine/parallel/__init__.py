"""Tensor and pipeline parallelism for the torch engine: one process a rank.

Rank 0 is the engine (scheduler, sampler, the model's first stage); it spawns the other ranks
(worker_main.py) and ships each launch's packed metadata to them (launch_channel.py). Tensor
parallel ranks split heads, MLP columns and the vocabulary as convert wrote their rank files;
pipeline stages own contiguous layer ranges and pass hidden states to the next stage, the last
one sending the logits back to rank 0 (stage_link.py).
"""
