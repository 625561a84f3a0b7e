"""GPU benchmark and profiling tools, run from the repository root as `python -m scripts.<name>`.

They import the pipeline's engine and helpers but neither hydra nor modelopt, so they run on a
GPU machine that has only torch, triton and transformers. Each has a `--tiny` (or `--quick`) CPU
mode that the unit tests run.
"""
