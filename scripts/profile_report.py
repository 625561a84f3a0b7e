"""Report side of scripts.profile_engine: a torch.profiler chrome trace -> per-step numbers
-> markdown.

Pure functions over the exported trace's event list, so they are tested without a profiler. The
driver wraps each engine.step() in a STEP_RANGE range and syncs the device after it, outside the
range: host events count only inside a step range (the driver's own sync is not the engine's),
and every device event of a step lies before the next step's range begins.
"""

STEP_RANGE = "profile_engine.step"
ENGINE_RANGES = (
    "engine.schedule",
    "engine.prepare",
    "engine.forward",
    "engine.sample",
    "engine.postprocess",
)
# first match wins, on the lower-cased kernel name: attention before gemm (flash kernels carry
# sm90 in their names), the rest before gemm too since "mm_" is a loose token
KERNEL_CLASSES = (
    ("memcpy", ("memcpy",)),
    ("attention_decode", ("_decode_kernel", "_merge_kernel")),
    (
        "attention_prefill",
        ("_varlen_attention_kernel", "flash", "sdpa", "fmha", "efficient_attention"),
    ),
    ("kv_store", ("_store_kv", "index_copy")),  # on CUDA, rotary is fused into the store
    # rsqrt: an inductor-fused rmsnorm (build.torch.compile) is named after its ops
    ("norm_rotary_act", ("rmsnorm", "rms_norm", "rsqrt", "rotary", "silu", "act_and_mul")),
    ("sampling", ("argmax", "sort", "softmax", "multinomial", "topk", "cumsum")),
    # gemv: cuBLAS picks matrix-vector kernels for batch-1 linears
    ("gemm", ("gemm", "gemv", "cutlass", "xmma", "nvjet", "sm90", "cublas", "matmul", "mm_")),
)
KERNEL_CLASS_NAMES = (  # report order
    "gemm",
    "attention_prefill",
    "attention_decode",
    "norm_rotary_act",
    "kv_store",
    "sampling",
    "memcpy",
    "other",
)
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CALLS = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel",
    "cudaGraphLaunch",
)
# host waits for the device; cudaMemcpy (not Async) blocks too
SYNC_CALLS = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
)
SCALAR_READS = ("aten::item", "aten::_local_scalar_dense")  # each one a device -> host wait


def classify_kernel(name: str) -> str:
    lowered = name.lower()
    for kernel_class, tokens in KERNEL_CLASSES:
        if any(token in lowered for token in tokens):
            return kernel_class
    return "other"


def step_windows(events: list[dict]) -> list[tuple[float, float]]:
    """(start, end) in trace microseconds of every STEP_RANGE, in time order."""
    return sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "user_annotation" and e.get("name") == STEP_RANGE
    )


def busy_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals: device time with anything running."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def summarize_trace(events: list[dict]) -> dict:
    """Per-step means over the trace's steps: CPU ms of each engine range, device ms (busy and
    per kernel class), launches, kernels, host syncs and scalar reads."""
    windows = step_windows(events)
    num_steps = len(windows)
    assert num_steps, f"no {STEP_RANGE} ranges in the trace"

    def in_step(e: dict) -> bool:
        return any(start <= e["ts"] <= end for start, end in windows)

    host = [e for e in events if e.get("ph") == "X" and e.get("cat") not in DEVICE_CATEGORIES]
    host = [e for e in host if in_step(e)]
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES]
    ranges = {name: 0.0 for name in ENGINE_RANGES}
    for e in host:
        if e["cat"] == "user_annotation" and e["name"] in ranges:
            ranges[e["name"]] += e["dur"] / 1e3
    classes = {name: 0.0 for name in KERNEL_CLASS_NAMES}
    for e in device:
        classes[classify_kernel(e["name"])] += e["dur"] / 1e3

    def count(names: tuple[str, ...]) -> dict[str, float]:
        return {n: sum(e["name"] == n for e in host) / num_steps for n in names}

    syncs = count(SYNC_CALLS)
    launches = count(LAUNCH_CALLS)
    return {
        "num_profiled_steps": num_steps,
        "cpu_ms": {name: ms / num_steps for name, ms in ranges.items()},
        "gpu_busy_ms": busy_us([(e["ts"], e["ts"] + e["dur"]) for e in device]) / 1e3 / num_steps,
        "gpu_ms": {name: ms / num_steps for name, ms in classes.items()},
        "num_kernels": sum(e["cat"] == "kernel" for e in device) / num_steps,
        "num_launches": sum(launches.values()),
        "num_graph_launches": launches["cudaGraphLaunch"],
        "num_syncs": sum(syncs.values()),
        "sync_events": {
            **syncs,
            **count(SCALAR_READS),
            "Memcpy DtoH": sum("DtoH" in e["name"] for e in device) / num_steps,
        },
    }


def one_step_trace(trace: dict, index: int = 0) -> dict:
    """The trace cut to step `index`: metadata, then every event from its range's start to the
    next step's start (the driver's sync keeps the step's device work inside that span)."""
    starts = [start for start, _ in step_windows(trace["traceEvents"])]
    begin = starts[index]
    end = starts[index + 1] if index + 1 < len(starts) else float("inf")
    kept = [
        e
        for e in trace["traceEvents"]
        if e.get("ph") == "M" or ("ts" in e and begin <= float(e["ts"]) < end)
    ]
    return {**trace, "traceEvents": kept}


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(results: dict) -> str:
    ranges = [name.removeprefix("engine.") for name in ENGINE_RANGES]
    header = (
        ["phase", "batch", "tok/step", "wall ms", "GPU busy ms", "GPU idle %"]
        + [f"CPU {r} ms" for r in ranges]
        + [f"GPU {c} ms" for c in KERNEL_CLASS_NAMES]
        + ["launches", "kernels", "syncs", "CUDA graph"]
    )
    s = results["settings"]
    parts = [
        f"{results['device']}, torch {results['torch']}: prompts of {s['input_len']} tokens, "
        f"decode measured over {s['num_profile_steps']} steps after {s['num_warmup_steps']} "
        f"warm-up steps."
    ]
    for name, model in results["models"].items():
        lines = [f"### {name} ({model['dtype']}, load {model['load_s']:.0f} s)", ""]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for r in model["rows"]:
            cells = [r["phase"], str(r["batch_size"]), fmt(r["tokens_per_step"], 0)]
            cells += [fmt(r["wall_ms"]), fmt(r["gpu_busy_ms"]), fmt(r["gpu_idle_pct"], 0)]
            cells += [fmt(r["cpu_ms"][n]) for n in ENGINE_RANGES]
            cells += [fmt(r["gpu_ms"][c]) for c in KERNEL_CLASS_NAMES]
            cells += [fmt(r["num_launches"], 0), fmt(r["num_kernels"], 0), fmt(r["num_syncs"], 1)]
            cells.append("yes" if r["is_cuda_graph"] else "no")
            lines.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    note = "Per step means; wall ms unprofiled (device synced), the rest from the profiled round."
    return "\n\n".join(parts + [note])
