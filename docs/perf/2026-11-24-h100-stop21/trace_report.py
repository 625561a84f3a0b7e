"""Experiment: a served request's waterfall from PIPELINE_TRACE_DIR files."""
import glob, json, sys, collections
import numpy as np
d = sys.argv[1]
client, stub, child, sched, steps = {}, {}, {}, {}, collections.defaultdict(list)
for path in glob.glob(f"{d}/*.jsonl"):
    pid = path.rsplit("-", 1)[1].split(".")[0]
    for line in open(path):
        try:
            r = json.loads(line)
        except Exception:
            continue
        k = r["k"]
        if k == "client": client[r["rid"]] = r
        elif k == "stub": stub[r["rid"]] = r
        elif k == "child": child[r["sid"]] = r["recv"]
        elif k == "sched":
            for s in r["sids"]: sched.setdefault(s, r["t"])
        elif k == "steps": steps[pid].extend(r["steps"])
rows = sorted(client.values(), key=lambda r: r["send"])
n = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
rows = rows[-n:]
t0, t1 = rows[0]["send"], max(r["final"] for r in rows)
# client turnaround: per thread, next send - this final
by_th = collections.defaultdict(list)
for r in sorted(client.values(), key=lambda r: r["send"]):
    by_th[r["th"]].append(r)
turn = {}
for lst in by_th.values():
    for a, b in zip(lst, lst[1:]):
        turn[a["rid"]] = b["send"] - a["final"]
H = collections.defaultdict(list)
for r in rows:
    s = stub.get(r["rid"])
    if r["rid"] in turn: H["client turnaround (final recv -> next send)"].append(turn[r["rid"]])
    H["client e2e (send -> final recv)"].append(r["final"] - r["send"])
    if not s: continue
    H["in: client send -> stub execute"].append(s["exec"] - r["send"])
    H["stub: execute -> submitted"].append(s["sub"] - s["exec"])
    c = child.get(s["sid"]); sc = sched.get(s["sid"])
    if c: H["pipe: submitted -> child recv"].append(c - s["sub"])
    if c and sc: H["engine: child recv -> first scheduled"].append(sc - c)
    if sc: H["engine: first scheduled -> first token at responder"].append(s["first"] - sc)
    H["engine: first token -> final token at responder"].append(s["final"] - s["first"])
    H["lane: final token -> final sent"].append(s["final_sent"] - s["final"])
    H["out: final sent -> client final recv"].append(r["final"] - s["final_sent"])
print(f"{len(rows)} requests, window {t1 - t0:.3f} s, {len(stub)} stub rows")
for k, v in H.items():
    v = np.array(v) * 1e3
    print(f"  {k:55s} mean {v.mean():7.2f}  p50 {np.percentile(v,50):7.2f}  p90 {np.percentile(v,90):7.2f}  p99 {np.percentile(v,99):7.2f} ms  (n={len(v)})")
for pid, st in steps.items():
    a = np.array(st)
    a = a[np.argsort(a[:, 0])]
    big = a[a[:, 2] >= 32]
    if len(big) < 10: continue
    dt = np.diff(big[:, 0]) * 1e3
    host = (big[:, 1] - big[:, 0]) * 1e3
    gap = (big[1:, 0] - big[:-1, 1]) * 1e3
    mixed = big[:-1, 4] > 0
    print(f"pid {pid}: {len(big)} steps (>=32 seqs), seqs/step {big[:,2].mean():.1f}, mixed {mixed.mean():.0%}")
    print(f"   step period ms: all {dt.mean():.3f} p50 {np.median(dt):.3f}; decode {dt[~mixed].mean():.3f} (p50 {np.median(dt[~mixed]):.3f}); mixed {dt[mixed].mean() if mixed.any() else 0:.3f}")
    print(f"   step() call ms mean {host.mean():.3f} p50 {np.median(host):.3f} p99 {np.percentile(host,99):.3f}; between calls mean {gap.mean():.3f} p99 {np.percentile(gap,99):.3f}")
