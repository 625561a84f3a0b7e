"""Requests streamed to the OpenAI-compatible frontend (POST /v1/completions, server-sent events),
one chunk per event: the bench's OpenAI target, as any OpenAI client would load it.

The prompt goes as token ids (the workload's exact input length), synthetic requests send
ignore_eos (vLLM's extension; end_id=-1 in the engine) to run to max_tokens, and each event's
tokens are read from stream_options.continuous_usage_stats (vLLM's extension): the usage so far
rides on every event, so tokens are counted as the server counted them, not re-tokenized.
"""

import json
import threading
from collections.abc import Iterator

from pipeline.bench.target import Chunk
from pipeline.bench.workload import BenchRequest

DATA = b"data: "


class OpenAIStreams:
    name = "openai"

    def __init__(self, url: str, model: str, timeout_s: float, api_key: str = "") -> None:
        """url: the frontend's base (http://host:port); model: its served model id."""
        self.url, self.model, self.timeout_s, self.api_key = url, model, timeout_s, api_key
        self._local = threading.local()  # .session: this thread's keep-alive connection
        self._sessions: list = []
        self._lock = threading.Lock()

    def _session(self):
        import requests

        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            with self._lock:
                self._sessions.append(session)
        return session

    def wait_ready(self, timeout_s: float) -> None:
        from pipeline.client.errors import wait_until_ready

        wait_until_ready(self.is_ready, self.model, self.url, timeout_s)

    def is_ready(self) -> bool:
        import requests

        try:
            return requests.get(f"{self.url}/health", timeout=5).ok
        except requests.RequestException:
            return False

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()

    def stream(self, request: BenchRequest, temperature: float, seed: int) -> Iterator[Chunk]:
        body = {
            "model": self.model,
            "prompt": list(request.prompt_token_ids),
            "max_tokens": request.max_tokens,
            "temperature": temperature,
            "ignore_eos": request.ignore_eos,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if temperature > 0:
            body["seed"] = seed
        num_tokens = 0
        with self._session().post(
            f"{self.url}/v1/completions",
            json=body,
            headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else None,
            stream=True,
            timeout=self.timeout_s,
        ) as response:
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
            for line in response.iter_lines():
                if not line.startswith(DATA) or line == b"data: [DONE]":
                    continue
                event = json.loads(line[len(DATA) :])
                if "error" in event:
                    raise RuntimeError(event["error"]["message"])
                if event.get("usage") is None or not event["choices"]:
                    continue  # the closing usage event repeats what the last one said
                made = event["usage"]["completion_tokens"]
                yield Chunk(made - num_tokens)
                num_tokens = made
