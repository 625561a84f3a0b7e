"""The served repository under fuzz, and the checks that it still serves as before.

Each case runs beside a witness: the fixed greedy canary streamed through the ensemble, sent
first and still in flight when the case arrives, so a case that fails requests other than its own
is caught. After the case: tritonserver is still the same live process, /v2/health/ready says 200,
the witness got the canary's text, and a probe straight to `tensorrt_llm` gives its first tokens
as before. Anything else is a death, charged to that case; the server then gets RECOVERY_S to
serve again by itself, else a fresh one is started, so one run still reports every entry point.
"""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import requests

from pipeline.errors import StageError
from pipeline.server import launch
from tests.integration.fuzz_cases import Case
from tests.integration.fuzz_ledger import Ledger, judge
from tests.integration.fuzz_transport import OK, Outcome, send, send_grpc

CANARY_PROMPT, CANARY_TOKENS = "The capital of France is", 8
PROBE_TOKENS = 2
REQUEST_TIMEOUT_S = 60.0  # per request: a 2-core CI machine under `pytest -n 2` is slow
RECOVERY_S = 30.0
MAX_STARTS = 5


def _text(value: str) -> np.ndarray:
    return np.array([[value.encode()]], np.object_)


CANARY = {
    "text_input": _text(CANARY_PROMPT),
    "max_tokens": np.array([[CANARY_TOKENS]], np.int32),
    "temperature": np.array([[0.0]], np.float32),
    "stream": np.array([[True]]),
}
PROBE = {
    "text_input": _text(CANARY_PROMPT),
    "request_output_len": np.array([[PROBE_TOKENS]], np.int32),
}


class FuzzedServer:
    def __init__(self, spec):
        self.spec = spec
        self.server = None
        self.num_starts = 0
        self.canary = self.probe = ""  # their texts before any case
        self.case_s = self.recovery_s = 0.0  # time in cases and checks; in recoveries
        self.ledger = Ledger()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="witness")

    @property
    def grpc_url(self) -> str:
        return self.server.endpoints.grpc_url

    @property
    def http_url(self) -> str:
        return self.server.endpoints.http_url

    @property
    def is_given_up(self) -> bool:
        return self.num_starts >= MAX_STARTS and self.server is None

    def start(self) -> None:
        self.num_starts += 1
        server = launch.local_server(self.spec.deploy, self.spec.workdir)
        server.__enter__()  # started and ready, or StageError with its log
        self.server = server
        if not self.canary:
            self.canary = self._canary().message
            self.probe = self._probe().message
            assert self.canary and self.probe, "the canary must generate text"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def close(self) -> None:
        self.stop()
        self._pool.shutdown()

    def _canary(self, first: threading.Event | None = None) -> Outcome:
        outputs = ("text_output",)
        return send_grpc(self.grpc_url, "ensemble", CANARY, outputs, REQUEST_TIMEOUT_S, first)

    def _probe(self) -> Outcome:
        outputs = ("text_output",)
        return send_grpc(self.grpc_url, "tensorrt_llm", PROBE, outputs, REQUEST_TIMEOUT_S)

    def try_case(self, case: Case) -> None:
        """Send one case beside the witness, judge it, and check the server after it."""
        if self.server is None:
            self.ledger.record(case, Outcome("not_run"), "not_run", "")
            return
        start = time.monotonic()
        first = threading.Event()
        witness = self._pool.submit(self._canary, first)
        first.wait(REQUEST_TIMEOUT_S)
        outcome = send(case, self.grpc_url, self.http_url, REQUEST_TIMEOUT_S)
        self.ledger.record(case, outcome, *judge(case, outcome))
        problems = self.problems(witness.result())
        self.case_s += time.monotonic() - start
        if problems:
            start = time.monotonic()
            self.ledger.death(case, problems, self._recover())
            self.recovery_s += time.monotonic() - start

    def problems(self, witness: Outcome | None = None) -> list[str]:
        """What is wrong with the server now; [] when it serves as before."""
        process = self.server.process
        if process.poll() is not None:
            return [f"tritonserver (pid {process.pid}) exited with code {process.returncode}"]
        problems = []
        try:
            ready = requests.get(f"{self.http_url}/v2/health/ready", timeout=10).status_code
        except requests.RequestException as exc:
            ready = repr(exc)
        if ready != 200:
            problems.append(f"/v2/health/ready -> {ready}")
        if witness is not None and (witness.status, witness.message) != (OK, self.canary):
            problems.append(f"the canary in flight got {witness.status}: {witness.message!r}")
        probe = self._probe()
        if (probe.status, probe.message) != (OK, self.probe):
            problems.append(f"the probe after it got {probe.status}: {probe.message!r}")
        return problems

    def _recover(self) -> str:
        deadline = time.monotonic() + RECOVERY_S
        while time.monotonic() < deadline and self.server.process.poll() is None:
            time.sleep(2)
            if not self.problems(self._canary()):
                return f"served again by itself within {RECOVERY_S:.0f} s"
        self.stop()
        if self.num_starts >= MAX_STARTS:
            return f"still failing; not restarted after {self.num_starts} starts"
        try:
            self.start()
        except StageError as exc:  # the run goes on without a server: its cases are not run
            return f"restart failed: {str(exc).splitlines()[0]}"
        return "tritonserver restarted"

    def final_check(self) -> dict:
        """The canary once more over gRPC and HTTP /generate, against its text before."""
        if self.server is None:
            return {"problems": ["no server left to check"]}
        body = f'{{"text_input": "{CANARY_PROMPT}", "max_tokens": {CANARY_TOKENS}}}'
        http = requests.post(
            f"{self.http_url}/v2/models/ensemble/generate",
            data=body.replace("}", ', "temperature": 0.0}'),
            timeout=REQUEST_TIMEOUT_S,
        ).json()
        return {
            "before": self.canary,
            "grpc_after": self._canary().message,
            "http_after": http.get("text_output", http),
            "problems": self.problems(),
            "pid": self.server.process.pid,
        }
