"""An OpenAI-compatible HTTP API in front of the served `tensorrt_llm` model
(docs/guide/openai_api.md).

Ownership: routes.Frontend owns a request from its bytes to its last event; the served model
(tokenizer, engine limits) and the gRPC channel (triton_llm.TritonLLM) are shared, read-only
but for the channel; admission.Admission counts the engine requests in flight and queues the
requests past its limit. A frontend is one per process: server.py runs it in a thread of the
caller's, workers.py in several processes on one port, built alike from recipe.FrontendRecipe.
"""
