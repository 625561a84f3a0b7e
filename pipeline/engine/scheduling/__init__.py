"""What runs each step, and the types that carry it to the runner and back: the Scheduler (queues,
preemption, suspects, the only one that updates a Sequence after scheduling), the BlockManager,
Sequence, SchedulerOutput / LaunchPlan (to the runner) and SampledTokens (back). No device work."""
