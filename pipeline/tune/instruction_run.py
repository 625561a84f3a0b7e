"""`tune` on the instruction space: anneal the memory-instruction schedule of one kernel at one
shape class, and say plainly whether it gained beyond the noise."""

import dataclasses
import logging
import tempfile
from pathlib import Path

from pipeline.engine.kernels.tuned_configs import TUNED
from pipeline.specs.tune import TuneSpec
from pipeline.tune.annealer import Annealer
from pipeline.tune.kernel_items import KernelItem
from pipeline.tune.kernel_run import engine_items

log = logging.getLogger(__name__)
UNIT = "ms per launch (CUDA events over a CUDA graph)"
LEVEL = (
    "PTX: no public assembler writes sm_90 SASS, and Triton rebuilds a kernel from a PTX file "
    "(the ir_override launch option); ptxas then schedules that PTX again"
)


def search_schedule(item: KernelItem, search, options, out_dir: Path) -> dict:
    """The annealed schedule of `item`'s kernel at its default launch config: the search's
    row, and a summary that states the gain or its absence."""
    import torch

    from pipeline.tune.instruction_space import InstructionSpace
    from pipeline.tune.kernel_timer import KernelTimer

    TUNED.install({})
    device = torch.device("cuda", torch.cuda.current_device())
    timer = KernelTimer(device, search.launches_per_sample, search.flush_l2)
    with tempfile.TemporaryDirectory(prefix="ptx_schedules_") as tmp:
        space = InstructionSpace(item, device, search, timer, Path(tmp))
        if mismatch := space.control_mismatch():
            summary = (
                f"{space.name}: not searched: the kernel's own PTX rebuilt through Triton's "
                f"ir_override already fails the reference check ({mismatch}), so no schedule's "
                f"result could be told from the rebuild's. Level: {LEVEL}."
            )
            (out_dir / "instruction_schedule.txt").write_text(summary + "\n")
            return {"summary": summary, "level": "PTX"}
        result = Annealer(options).run(space)
        num_sass = len({t.settings["sass"] for t in result.trials})
    row = {"item": space.name, **result.to_dict()}
    if result.is_improved:
        verdict = (
            f"{100 * row['gain']:.1f}% faster than Triton's own schedule, beyond the noise "
            f"({result.default_cost:.4f} -> {result.tuned_cost:.4f} ms)"
        )
    else:
        verdict = (
            f"no gain beyond the noise ({result.default_cost:.4f} ms, best "
            f"{min(t.cost for t in result.trials if t.cost is not None):.4f} ms): ptxas "
            f"reschedules the reordered PTX, and the distinct SASS it produced ran no faster"
        )
    summary = (
        f"{space.name}: {len(space.kernel.movable)} movable memory instructions; "
        f"{len(result.trials)} schedules measured ({num_sass} distinct SASS), "
        f"{row['num_rejected_for_correctness']} refused by the reference check. Result: {verdict}. "
        f"Level: {LEVEL}."
    )
    log.info("tune: %s", summary)
    (out_dir / "instruction_schedule.txt").write_text(summary + "\n")
    return {"summary": summary, "search": row, "level": "PTX"}


def tune_instructions(tune: TuneSpec, engine_dir: Path, out_dir: Path) -> dict:
    search = tune.instructions
    kernel_search = dataclasses.replace(tune.kernels, kernels=(search.kernel,))
    if search.kernel == "varlen_attention":
        kernel_search = dataclasses.replace(kernel_search, prompt_tokens=(search.num_tokens,))
    items = engine_items(engine_dir, kernel_search)
    if not items:
        from pipeline.errors import ConfigError

        raise ConfigError(
            f"tune.instructions.kernel={search.kernel!r} does not run in this engine "
            f"({engine_dir}); pick one it runs (varlen_attention, paged_decode_attention, or "
            f"int8_gemv with quant=int8_wo)"
        )
    found = search_schedule(items[-1], kernel_search, tune.anneal, out_dir)
    return {
        "items": [found["search"]] if "search" in found else [],  # none: the control failed
        "unit": UNIT,
        "sections": {"Instruction schedules": found["summary"]},
    }
