"""Running a launch on the device: the ModelRunner, the packed step (step_inputs), CUDA graphs,
pipeline micro-batches (launch_schedule), prompt scoring, KV-cache sizing, weights loading, and for
multi-rank engines the launch channel, the rank groups and the workers' entry point."""
