"""Measured-feedback tuning: one simulated annealer (annealer) over search spaces that supply
their own moves, correctness gate and measurement: serving knobs (serving_space), Triton kernel
launch configs (kernel_space) and PTX memory-instruction schedules (instruction_space). Kernel
results go to a tuning cache (tuning_cache) that builds copy into the engine dir."""
