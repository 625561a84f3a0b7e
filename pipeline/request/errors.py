"""How the serving side says what failed, in words both ends of a hop read.

ENGINE_UNAVAILABLE opens the message of every request refused because the engine behind the
served model is down (restarting, or given up after too many restarts): the Triton model writes
it, and the OpenAI frontend, which sees only the message text over gRPC, answers 503 for it.
SHUTTING_DOWN opens every error of a server's drain (pipeline.triton_models.drain): 503 too."""

ENGINE_UNAVAILABLE = "engine unavailable"
SHUTTING_DOWN = "the server is shutting down"
