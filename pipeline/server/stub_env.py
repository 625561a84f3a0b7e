"""An env for the python-backend stubs on top of this one, for when this one has numpy 2.

Triton 2.51's stub needs numpy<2 (stub_python.py). Where this env must keep numpy 2 (an NGC or
PyTorch image), this builds a venv of the same Python that sees this env's site-packages after
its own, with numpy<2 installed in front. --hide keeps some of this env's packages out of the
stubs' sight: a scikit-learn built for NumPy 2 fails to import under numpy 1.x, and older
transformers import it whenever it is installed.

    python -m pipeline.server.stub_env /opt/stub-env [--hide sklearn] [-- pip install args]
    python -m pipeline serve deploy.stub_python=/opt/stub-env/bin/python3

With --hide the env lists this env's packages as they are now: build it again after installs.
"""

import argparse
import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

from pipeline.errors import StageError
from pipeline.server import stub_python

_PURELIB = "import sysconfig; print(sysconfig.get_path('purelib'))"


def _top_level_name(entry: Path) -> str:
    return entry.name.split(".")[0].split("-")[0]


def _base_site_line(base: Path, env_dir: Path, hide: set[str]) -> str:
    """The .pth line that adds `base`, or (with hide) a dir in env_dir of links to all of its
    entries but the hidden ones, found through sys.prefix so the env can be renamed."""
    if not hide:
        # addsitedir, not a bare path: the base dir's own .pth files (editable installs) count
        return f"import site; site.addsitedir({str(base)!r})"
    view = env_dir / "base-site" / base.name
    view.mkdir(parents=True)
    for entry in base.iterdir():
        if _top_level_name(entry) not in hide:
            (view / entry.name).symlink_to(entry)
    in_env = f"os.path.join(sys.prefix, 'base-site', {base.name!r})"
    return f"import os, site, sys; site.addsitedir({in_env})"


def create(env_dir: Path, hide: tuple[str, ...] = (), pip_args: tuple[str, ...] = ()) -> Path:
    """Build the env at env_dir (in a temp dir, then renamed); returns its bin/python3."""
    env_dir = Path(env_dir).absolute()
    if env_dir.exists():
        raise StageError(f"stub_env: {env_dir} exists; remove it or choose another directory")
    tmp = env_dir.with_name(f".{env_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        venv.create(tmp, with_pip=False, symlinks=True)
        purelib = subprocess.run(
            [str(tmp / "bin" / "python3"), "-E", "-c", _PURELIB],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        site_dir = tmp / Path(purelib).relative_to(tmp.resolve())
        lines = [
            _base_site_line(Path(p), tmp, set(hide))
            for p in site.getsitepackages()
            if Path(p).is_dir()
        ]
        (site_dir / "base-env.pth").write_text("\n".join(lines) + "\n")
        if not stub_python.probe(str(tmp / "bin" / "python3")).has_usable_numpy:
            pip = [sys.executable, "-m", "pip", "install", "--target", str(site_dir)]
            subprocess.run([*pip, "numpy<2", *pip_args], check=True)
        os.rename(tmp, env_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    python3 = env_dir / "bin" / "python3"
    stub_python.check_numpy(stub_python.probe(str(python3)))
    return python3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.server.stub_env", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("env_dir", type=Path)
    parser.add_argument(
        "--hide", action="append", default=[], help="top-level module to hide (repeatable)"
    )
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])  # after --: extra `pip install` arguments
    try:
        python3 = create(args.env_dir, tuple(args.hide), tuple(argv[split + 1 :]))
    except (StageError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"serve with deploy.stub_python={python3}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
