"""Frozen, typed specs, one module per Hydra config group. Built once in pipeline.config."""
