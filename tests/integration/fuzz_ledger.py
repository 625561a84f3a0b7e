"""Verdicts on fuzz cases, their tally, and the report (JSON + markdown).

A case is judged by what came back: a refusal is clear when its message names something that was
made nasty (the client's name, or the name the entry point passes it on as) and, for one nasty
integer, gives the value sent. Triton's own JSON parser refuses wrong JSON types before any model
sees them, with messages that name no input; those are counted apart (parser_refused), as the
models cannot word them.
"""

import re
from collections import Counter, defaultdict

from tests.integration.fuzz_cases import Case
from tests.integration.fuzz_transport import BROKEN, EMPTY, ERROR, HUNG, Outcome
from tests.integration.fuzz_values import GRPC, I32_MAX, I32_MIN

FAILURES = ("valid_refused", "invalid_served", "unclear_error", "lost")
VERDICTS = ("served", "refused", "parser_refused", *FAILURES, "not_run")
PARSER_ERRORS = (
    "Unable to parse",
    "failed to parse the request JSON",
    "attempt to get members for non-object",
)
# the names an error may give an input by: the entry points pass inputs on under other names
ALIASES = {
    "text_input": ("text_input", "QUERY", "prompt"),
    "input_ids": ("input_ids", "prompt"),
    "max_tokens": ("max_tokens", "request_output_len", "REQUEST_OUTPUT_LEN"),
    "top_k": ("top_k", "runtime_top_k"),
    "top_p": ("top_p", "runtime_top_p"),
    "end_id": ("end_id", "END_ID"),
    "pad_id": ("pad_id", "PAD_ID"),
    "stop_words": ("stop_words", "STOP_WORDS_DICT", "stop_words_list"),
    "bad_words": ("bad_words", "BAD_WORDS_DICT", "bad_words_list"),
    "stream": ("stream", "streaming"),
}
ALIASES |= {
    "request_output_len": ALIASES["max_tokens"],
    "runtime_top_k": ALIASES["top_k"],
    "runtime_top_p": ALIASES["top_p"],
    "stop_words_list": ALIASES["stop_words"],
    "bad_words_list": ALIASES["bad_words"],
    "streaming": ALIASES["stream"],
}
# Triton's own checks of a request's tensors, before any model: they name the input, not values
TRITON_CHECKS = ("unexpected inference input", "unexpected shape", "data-type", "batch size")
MAX_LISTED = 60  # failures listed in the markdown (the JSON has all)


def _words(text: str) -> str:
    return " " + re.sub(r"[^a-z0-9]+", " ", text.lower()) + " "


def names_it(message: str, nasty: dict) -> bool:
    said = _words(message)
    return any(_words(alias) in said for n in nasty for alias in ALIASES.get(n, (n,)))


def judge(case: Case, outcome: Outcome) -> tuple[str, str]:
    """(verdict, why) for one case."""
    if outcome.status in (HUNG, BROKEN):
        return "lost", outcome.message
    if outcome.status != ERROR:
        if case.must_refuse:
            what = "an answer without outputs" if outcome.status == EMPTY else "an answer"
            return "invalid_served", f"{what} to a request that must be refused"
        return "served", ""
    message = outcome.message
    if not case.nasty:
        return "valid_refused", message
    if case.protocol != GRPC and message.startswith(PARSER_ERRORS):
        return "parser_refused", message
    if "body" in case.nasty:
        return "refused", message
    if not names_it(message, case.nasty):
        return "unclear_error", f"names none of {sorted(case.nasty)}: {message}"
    value = _sent_integer(case)
    is_model_check = not any(check in message for check in TRITON_CHECKS)
    if value is not None and is_model_check and str(value) not in message:
        return "unclear_error", f"does not give the value sent ({value}): {message}"
    return "refused", message


def _sent_integer(case: Case) -> int | None:
    """The one nasty value when it is an integer the server received as sent."""
    if len(case.nasty) != 1:
        return None
    value = case.inputs.get(next(iter(case.nasty)))
    if value is None or value.layout != "scalar" or value.dtype is not None:
        return None
    data = value.data
    if not isinstance(data, int) or isinstance(data, bool):
        return None
    # HTTP JSON past int32 is wrapped by Triton's parser before a model sees it
    return data if case.protocol == GRPC or I32_MIN <= data <= I32_MAX else None


class Ledger:
    def __init__(self):
        self.counts: dict[str, Counter] = defaultdict(Counter)  # "model/protocol" -> verdicts
        self.failures: list[dict] = []
        self.deaths: list[dict] = []

    def record(self, case: Case, outcome: Outcome, verdict: str, why: str) -> None:
        key = f"{case.model}/{case.protocol}"
        self.counts[key]["cases"] += 1
        self.counts[key][verdict] += 1
        if verdict in FAILURES:
            entry = {"entry_point": key, "verdict": verdict, "nasty": case.nasty}
            entry |= {"why": why[:500]}
            self.failures.append(entry | {"request": case.describe()[:1500]})

    def death(self, case: Case, problems: list[str], recovery: str) -> None:
        self.counts[f"{case.model}/{case.protocol}"]["deaths"] += 1
        self.deaths.append(
            {
                "request": case.describe()[:1500],
                "nasty": case.nasty,
                "problems": problems,
                "recovery": recovery,
            }
        )

    def report(self, **extra) -> dict:
        total = Counter()
        for counts in self.counts.values():
            total.update(counts)
        return {
            "cases": total["cases"],
            "served": total["served"],
            "clear_errors": total["refused"] + total["parser_refused"],
            "server_deaths": len(self.deaths),
            "requests_lost": total["lost"],
            "failures_by_verdict": {v: total[v] for v in FAILURES},
            "by_entry_point": {k: dict(v) for k, v in sorted(self.counts.items())},
            "deaths": self.deaths,
            "failures": self.failures,
            **extra,
        }


def markdown(report: dict) -> str:
    columns = ("cases", *VERDICTS, "deaths")
    lines = [
        f"## Serving fuzz: {report['cases']} cases in {report['wall_s']:.0f} s "
        f"({report['case_s']:.0f} s in cases, {report['recovery_s']:.0f} s in recoveries)",
        "",
        f"served {report['served']}, clear errors {report['clear_errors']}, server deaths "
        f"{report['server_deaths']}, requests lost {report['requests_lost']}, failures "
        f"{report['failures_by_verdict']}, server starts {report['server_starts']}",
        f"canary after the run: {report['canary']}",
        "",
        "| entry point / protocol | " + " | ".join(columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for key, counts in report["by_entry_point"].items():
        lines.append(f"| {key} | " + " | ".join(str(counts.get(c, 0)) for c in columns) + " |")
    for death in report["deaths"]:
        lines += [
            "",
            f"- DEATH ({death['recovery']}; nasty {death['nasty']}): {death['problems']}",
            f"  {death['request']}",
        ]
    for failure in report["failures"][:MAX_LISTED]:
        lines += [
            "",
            f"- {failure['verdict']} ({failure['entry_point']}; nasty {failure['nasty']}): "
            f"{failure['why']}",
            f"  {failure['request']}",
        ]
    return "\n".join(lines)
