"""Load generation, metrics, reports, sweeps and the regression gate.

Who does what: workload (requests), load_generator (server: threaded gRPC streams) and
direct_driver (the engine stepped in-process) turn requests into records; metrics summarizes
them; report / sweep_report write JSON, markdown and plots; threshold_search finds the first
failing size; baseline + comparator judge a run against baselines/. Stages: pipeline.stages.
bench, profile, sweep, regress.
"""
