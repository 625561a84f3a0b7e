"""The engine loop and its process: LLMEngine (schedule -> launch -> update), AsyncLLMEngine (one
thread drives it), EngineProcess (the engine in a process of its own), the launch policy (steps a
launch, pacing, the reserve) and the start-up probe."""
