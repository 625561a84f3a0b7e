"""SIP-style instruction schedules of one Triton kernel as a search space, at the PTX level.

Level: PTX, because there is no public assembler for sm_90 SASS (CuAssembler and turingas stop
before Hopper), while Triton rebuilds a kernel from a PTX file given as the launch option
`ir_override` (CUDAOptions.ir_override, read in triton/compiler/compiler.py's compile loop, Triton
3.6); it is part of the compile key, so each schedule is its own compiled kernel.
ptxas schedules the PTX it gets once more, and a single moved load rarely survives into the
SASS; so a move here is `moves_per_step` legal moves (ptx_schedule), and a neighbour must
assemble to SASS that differs from the incumbent's (ptxas and cuobjdump, as Triton ships them),
else it is drawn again: every trial measures different machine code.
"""

import hashlib
import logging
import random
import subprocess
import tempfile
from pathlib import Path

import torch

from pipeline.engine.kernels.tuned_configs import TUNED
from pipeline.tune.kernel_items import KernelItem
from pipeline.tune.kernel_space import PROBLEMS
from pipeline.tune.ptx_schedule import PtxKernel

log = logging.getLogger(__name__)

MOVES_PER_STEP = 16
MAX_DRAWS = 8  # neighbours drawn before settling for one with the incumbent's SASS
KERNEL_FUNCTIONS = {
    "varlen_attention": ("pipeline.engine.kernels.varlen_attention", "_varlen_attention_kernel"),
    "paged_decode_attention": ("pipeline.engine.kernels.paged_attention", "_decode_kernel"),
    "int8_gemv": ("pipeline.engine.kernels.int8_gemv", "_w8a16_gemv_kernel"),
}


def _jit_function(kernel: str):
    import importlib

    module, name = KERNEL_FUNCTIONS[kernel]
    return getattr(importlib.import_module(module), name)


def compiled_ptx(kernel: str, run) -> tuple[str, str]:
    """(PTX, sm arch) of the kernel as `run` launches it: its JIT cache cleared first, so the
    one compiled variant is this launch's."""
    fn = _jit_function(kernel)
    while not hasattr(fn, "device_caches"):  # under @triton.heuristics
        fn = fn.fn
    fn.device_caches.clear()
    run()
    torch.cuda.synchronize()
    compiled = [k for caches in fn.device_caches.values() for k in caches[0].values()]
    compiled = [k.result() if hasattr(k, "result") else k for k in compiled]  # async compiles
    target = compiled[-1].metadata.target
    return compiled[-1].asm[
        "ptx"
    ], f"sm_{target.arch}a" if target.arch >= 90 else f"sm_{target.arch}"


def _ptxas(arch: str) -> str:
    """The ptxas Triton itself assembles this arch's PTX with: wheels that ship two (Triton 3.9
    does) pick the newer for sm_90 and up, whose PTX version the older one refuses."""
    from triton import knobs

    try:
        from triton.backends.nvidia.compiler import get_ptxas
    except ImportError:  # one ptxas in the wheel
        return knobs.nvidia.ptxas.path
    return get_ptxas(int(arch.removeprefix("sm_").rstrip("a"))).path


def sass_digest(ptx: str, arch: str) -> str:
    """Digest of the SASS instructions ptxas makes of the PTX (offsets and encodings left out)."""
    from triton import knobs

    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        ptxas = [_ptxas(arch), f"--gpu-name={arch}", str(src), "-o", str(cubin)]
        subprocess.run(ptxas, check=True, capture_output=True)
        dump = subprocess.run(
            [knobs.nvidia.cuobjdump.path, "-sass", str(cubin)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    code = [
        line.split("*/", 1)[1].split(";")[0].strip() for line in dump.splitlines() if "*/" in line
    ]
    return hashlib.sha256("\n".join(code).encode()).hexdigest()[:16]


class InstructionSpace:
    def __init__(self, item: KernelItem, device: torch.device, search, timer, work_dir: Path):
        if item.kernel not in KERNEL_FUNCTIONS:
            raise ValueError(
                f"tune.instructions.kernel={item.kernel!r}: use one of {sorted(KERNEL_FUNCTIONS)}"
            )
        self.item = item
        self.name = f"{item.kernel} [{item.label}] schedules"
        self.problem = PROBLEMS[item.kernel](item, device, search.context_len)
        self.config = {k.name: k.default for k in self.problem.knobs()}  # the default launch
        self.device = device
        self.timer = timer
        self.work_dir = work_dir
        with TUNED.trying(item.kernel, item.shape, self.config):
            ptx, self.arch = compiled_ptx(item.kernel, self.problem.run)
        self.kernel = PtxKernel(ptx)
        self._sass: dict[tuple, str] = {}

    def sass(self, order: tuple) -> str:
        if order not in self._sass:
            self._sass[order] = sass_digest(self.kernel.render(order), self.arch)
        return self._sass[order]

    def initial(self) -> tuple:
        return self.kernel.identity()

    def _moved(self, order: tuple, rng: random.Random, num_moves: int) -> tuple:
        for _ in range(num_moves):
            order = self.kernel.random_move(order, rng) or order
        return order

    def neighbour(self, order: tuple, rng: random.Random) -> tuple | None:
        moved = None
        for _ in range(MAX_DRAWS):
            moved = self._moved(order, rng, MOVES_PER_STEP)
            if moved != order and self.sass(moved) != self.sass(order):
                return moved
        return moved if moved != order else None

    def sample(self, rng: random.Random) -> tuple:
        return self._moved(self.initial(), rng, rng.randint(1, 8 * MOVES_PER_STEP))

    def describe(self, order: tuple) -> dict:
        displaced = sum(a != b for a, b in zip(order, self.initial(), strict=True))
        return {"statements_moved": displaced, "sass": self.sass(order)}

    def _launch_config(self, order: tuple, override: bool = False) -> dict:
        if order == self.initial() and not override:
            return self.config
        text = self.kernel.render(order)
        path = self.work_dir / f"{hashlib.sha256(text.encode()).hexdigest()[:20]}.ptx"
        if not path.is_file():
            path.write_text(text)
        return {**self.config, "ir_override": str(path)}

    def check(self, order: tuple, override: bool = False) -> str | None:
        """override: the unmoved order too goes through ir_override (the control)."""
        with TUNED.trying(self.item.kernel, self.item.shape, self._launch_config(order, override)):
            outputs = self.problem.run()
        torch.cuda.synchronize(self.device)
        return self.problem.mismatch(outputs)

    def control_mismatch(self) -> str | None:
        """The kernel's own, unmoved PTX rebuilt through ir_override against the reference:
        a failure here is the rebuild path's, not a schedule's."""
        log.info("tune: control: the unmoved PTX through ir_override")
        return self.check(self.initial(), override=True)

    def measure(self, order: tuple, repeats: int) -> list[float]:
        with TUNED.trying(self.item.kernel, self.item.shape, self._launch_config(order)):
            return self.timer.time_ms(self.problem.run, repeats)

    def autotune_list(self) -> list:
        return []
