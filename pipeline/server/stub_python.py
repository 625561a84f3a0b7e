"""The Python that the python-backend stubs embed, probed before tritonserver starts.

A stub does not run the interpreter that started tritonserver: it embeds libpython, takes its
prefix (so its site-packages) from `python3` on PATH, and ignores PYTHONPATH. The probe therefore
runs that same `python3` with -E, and so sees the packages the stubs will see.

Triton 2.51's stub (nvidia-pytriton 0.7.0) predates NumPy 2: under numpy>=2 it builds the bytes
of every input tensor with a zero stride, so a BYTES input of length 24 reads as 0x18181818 and
the stub dies ("unpack_from requires a buffer of at least 404232220 bytes"). That is refused here,
with the way out, instead of a server whose every request fails.
"""

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import StageError

_PROBE = (
    "import json, sys, sysconfig\n"
    "try:\n"
    "    import numpy\n"
    "    numpy_version = numpy.__version__\n"
    "except ImportError:\n"
    "    numpy_version = None\n"
    "print(json.dumps({'version': '%d.%d' % sys.version_info[:2], "
    "'libdir': sysconfig.get_config_var('LIBDIR'), 'numpy': numpy_version}))\n"
)
STUB_ENV_FIX = (
    "`python -m pipeline.server.stub_env <dir>` builds an env for the stubs on top of this one "
    "with numpy<2, then serve with deploy.stub_python=<dir>/bin/python3"
)


@dataclass(frozen=True, slots=True)
class StubPython:
    bin_dir: Path  # goes first on the server's PATH
    version: str  # "3.12": picks the wheel's stub built for it
    libdir: str  # its libpython's directory, first on LD_LIBRARY_PATH
    numpy: str | None

    @property
    def has_usable_numpy(self) -> bool:
        return self.numpy is not None and int(self.numpy.split(".")[0]) < 2


def probe(executable: str = "") -> StubPython:
    """The stubs' Python: `python3` next to `executable` (deploy.stub_python), "" = this one."""
    bin_dir = Path(executable).expanduser().absolute().parent if executable else None
    python3 = (bin_dir or Path(sys.executable).parent) / "python3"
    where = f"deploy.stub_python={executable}" if executable else f"this interpreter's {python3}"
    if not python3.is_file():
        raise StageError(
            f"serve: the python backend stubs run `python3` from the interpreter's directory, and "
            f"there is none at {python3} ({where}); point deploy.stub_python at a venv's "
            f"bin/python3"
        )
    try:
        result = subprocess.run(
            [str(python3), "-E", "-c", _PROBE], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StageError(f"serve: could not run {python3} ({where}): {exc}") from exc
    try:
        facts = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise StageError(
            f"serve: {python3} ({where}) exited {result.returncode} on a one-line probe: "
            f"{result.stderr.strip()[-500:]}"
        ) from None
    return StubPython(python3.parent, facts["version"], facts["libdir"] or "", facts["numpy"])


def check_numpy(stub: StubPython) -> None:
    if stub.has_usable_numpy:
        return
    python3 = stub.bin_dir / "python3"
    if stub.numpy is None:
        raise StageError(
            f"serve: {python3} (the python backend stubs' Python) has no numpy; install "
            f"'numpy<2' there, or {STUB_ENV_FIX}"
        )
    raise StageError(
        f"serve: the python backend stubs would run with numpy {stub.numpy} ({python3}); "
        f"Triton 2.51's stub predates NumPy 2 and corrupts every input tensor under it. "
        f"Install 'numpy<2' in that environment, or {STUB_ENV_FIX}"
    )
