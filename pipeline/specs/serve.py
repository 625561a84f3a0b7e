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
    # engine requests in flight (n counts each), over all the workers together; more: 429
    max_concurrent_requests: int = 256
    max_n: int = 8  # choices one request may ask for
    request_timeout_s: float = 600.0  # a request still generating after this fails (504)


@dataclass(frozen=True, slots=True)
class ServeSpec:
    openai: OpenAISpec = field(default_factory=OpenAISpec)
    # on SIGTERM or Ctrl-C: new requests are refused (the OpenAI API's 503, an error response
    # from Triton's model) while those in flight get this long to finish; then each still
    # running ends with an error (an SSE error event and [DONE], a 503, a final gRPC error)
    drain_timeout_s: float = 30.0
