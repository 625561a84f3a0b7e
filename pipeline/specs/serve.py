from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class OpenAISpec:
    """The OpenAI-compatible HTTP frontend that `serve` runs beside tritonserver."""

    enabled: bool = True
    host: str = "127.0.0.1"  # loopback only unless set; an API key is advised off it
    port: int = 9000
    # processes serving the port (SO_REUSEPORT); 0 = a quarter of the host's cores, 1 to 4 (one
    # on a small host, in a thread of serve's process). The limits and /metrics are the port's.
    workers: int = 0
    model_name: str = ""  # the id clients send as `model`; "" = model.name
    # the environment variable holding the bearer API key (kept out of configs and logs);
    # unset or empty: no key is asked for
    api_key_env: str = "PIPELINE_OPENAI_API_KEY"
    max_request_bytes: int = 1_048_576  # a larger body is refused (413)
    max_tokens_limit: int = 0  # most tokens one choice may ask for; 0 = the engine's max_seq_len
    # engine requests in flight (n counts each), over all the workers together; more wait.
    # 0 = 4 x the engine's max_batch_size: the engine keeps a queue of its own, so a batch slot
    # that frees is filled at its next step, not after a round trip through this frontend
    max_concurrent_requests: int = 0
    # requests waiting for room under max_concurrent_requests, over all the workers together
    # (lower `priority` first, then in arrival order); more: 429 with Retry-After. 0: none wait
    max_queued_requests: int = 16_384
    max_n: int = 8  # choices one request may ask for
    request_timeout_s: float = 600.0  # a request still generating after this fails (504)


VERIFY_MODES = ("stat", "full")


@dataclass(frozen=True, slots=True)
class ServeSpec:
    openai: OpenAISpec = field(default_factory=OpenAISpec)
    # how `serve` checks the deployed artifacts before it starts the server. stat (default):
    # each file's size and mtime against its manifest, sha256 only of the files whose stat
    # changed, then the torch engine's probe at every engine start (NUM_TOKENS prefills of a
    # short prompt: pipeline.engine.core.engine_probe), which catches a corruption that changes the
    # model's output. full: also sha256 every file of the engine and the repository, on
    # threads. sha256 measured at 1.1 GB/s a thread on a 16-core Xeon with SHA-NI (8 threads:
    # 8 GB/s from the page cache), 0.3 GB/s on a busy 2-core host: an 8B bfloat16 engine
    # (~16 GB) takes ~2 s cached on 8 threads, otherwise what its disk takes to read 16 GB
    # (~55 s at 0.3 GB/s)
    verify: str = "stat"
    # on SIGTERM or Ctrl-C: new requests are refused (the OpenAI API's 503, an error response
    # from Triton's model) while those in flight get this long to finish; then each still
    # running ends with an error (an SSE error event and [DONE], a 503, a final gRPC error)
    drain_timeout_s: float = 30.0
