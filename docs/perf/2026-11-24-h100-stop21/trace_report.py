"""A served request's waterfall from the files trace_patch.diff writes to PIPELINE_TRACE_DIR.

python trace_report.py TRACE_DIR [NUM_REQUESTS]   # the last NUM_REQUESTS sent (1024)
"""

import collections
import glob
import json
import sys

import numpy as np


def load(trace_dir: str):
    client, stub, child, sched = {}, {}, {}, {}
    steps = collections.defaultdict(list)  # pid -> (start, end, seqs, tokens, prompt seqs)
    for path in glob.glob(f"{trace_dir}/*.jsonl"):
        pid = path.rsplit("-", 1)[1].split(".")[0]
        for line in open(path):
            r = json.loads(line)
            if r["k"] == "client":
                client[r["rid"]] = r
            elif r["k"] == "stub":
                stub[r["rid"]] = r
            elif r["k"] == "child":
                child[r["sid"]] = r["recv"]
            elif r["k"] == "sched":
                for sid in r["sids"]:
                    sched.setdefault(sid, r["t"])
            elif r["k"] == "steps":
                steps[pid].extend(r["steps"])
    return client, stub, child, sched, steps


def hops(client, stub, child, sched, num_requests: int) -> dict[str, list[float]]:
    by_thread = collections.defaultdict(list)
    for r in sorted(client.values(), key=lambda r: r["send"]):
        by_thread[r["th"]].append(r)
    turn = {
        a["rid"]: b["send"] - a["final"]
        for rows in by_thread.values()
        for a, b in zip(rows, rows[1:], strict=False)
    }
    out = collections.defaultdict(list)
    for r in sorted(client.values(), key=lambda r: r["send"])[-num_requests:]:
        if r["rid"] in turn:
            out["client turnaround (final recv -> next send)"].append(turn[r["rid"]])
        out["client e2e (send -> final recv)"].append(r["final"] - r["send"])
        s = stub.get(r["rid"])
        if s is None:
            continue
        received, scheduled = child.get(s["sid"]), sched.get(s["sid"])
        out["in: client send -> stub execute"].append(s["exec"] - r["send"])
        out["stub: execute -> submitted"].append(s["sub"] - s["exec"])
        if received:
            out["pipe: submitted -> child recv"].append(received - s["sub"])
        if received and scheduled:
            out["engine: child recv -> first scheduled"].append(scheduled - received)
        if scheduled:
            out["engine: first scheduled -> first token at responder"].append(
                s["first"] - scheduled
            )
        out["engine: first token -> final token at responder"].append(s["final"] - s["first"])
        out["lane: final token -> final sent"].append(s["final_sent"] - s["final"])
        out["out: final sent -> client final recv"].append(r["final"] - s["final_sent"])
    return out


def main() -> None:
    client, stub, child, sched, steps = load(sys.argv[1])
    num_requests = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    print(f"{min(num_requests, len(client))} requests, {len(stub)} stub rows")
    for name, seconds in hops(client, stub, child, sched, num_requests).items():
        v = np.array(seconds) * 1e3
        p50, p90, p99 = np.percentile(v, [50, 90, 99])
        print(
            f"  {name:55s} mean {v.mean():7.2f}  p50 {p50:7.2f}  p90 {p90:7.2f}  "
            f"p99 {p99:7.2f} ms  (n={len(v)})"
        )
    for pid, rows in steps.items():  # one engine per process: direct (bench) or served (child)
        a = np.array(rows)
        a = a[np.argsort(a[:, 0])]
        full = a[a[:, 2] >= 32]  # the run's steady part, not its ramps
        if len(full) < 10:
            continue
        period = np.diff(full[:, 0]) * 1e3
        mixed = full[:-1, 4] > 0
        print(
            f"pid {pid}: {len(full)} steps (>=32 seqs), seqs/step {full[:, 2].mean():.1f}, "
            f"mixed {mixed.mean():.0%}"
        )
        print(
            f"   step period ms: all {period.mean():.3f} p50 {np.median(period):.3f}; decode "
            f"{period[~mixed].mean():.3f} (p50 {np.median(period[~mixed]):.3f})"
        )


if __name__ == "__main__":
    main()
