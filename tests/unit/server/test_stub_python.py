"""The stubs' Python is probed as the stubs see it (python3 next to it, PYTHONPATH ignored), and
numpy 2 there is refused with the way out before tritonserver starts."""

import json
import stat
import subprocess
import sys
from pathlib import Path

import numpy
import pytest

from pipeline.errors import StageError
from pipeline.server import stub_env, stub_python


def fake_python3(bin_dir: Path, body: str) -> Path:
    bin_dir.mkdir(parents=True)
    path = bin_dir / "python3"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def reporting(bin_dir: Path, numpy_version: str | None) -> Path:
    facts = {"version": "3.11", "libdir": "/usr/lib", "numpy": numpy_version}
    return fake_python3(bin_dir, f"echo '{json.dumps(facts)}'")


def test_this_interpreter_is_probed_as_the_stubs_see_it(tmp_path, monkeypatch):
    shadow = tmp_path / "numpy"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("__version__ = '2.9.9'\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the stubs ignore it, so must the probe
    probed = stub_python.probe()
    assert probed.bin_dir == Path(sys.executable).parent
    assert probed.version == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert probed.numpy == numpy.__version__
    stub_python.check_numpy(probed)


def test_numpy_2_for_the_stubs_is_refused_with_the_fix(tmp_path):
    python3 = reporting(tmp_path / "bin", "2.4.6")
    probed = stub_python.probe(str(python3))
    assert probed.numpy == "2.4.6"
    with pytest.raises(StageError, match=r"numpy 2\.4\.6 .*corrupts every input.*stub_env"):
        stub_python.check_numpy(probed)


def test_no_numpy_for_the_stubs_is_refused(tmp_path):
    with pytest.raises(StageError, match="has no numpy; install 'numpy<2'"):
        stub_python.check_numpy(stub_python.probe(str(reporting(tmp_path / "bin", None))))


def test_stub_python_without_python3_beside_it_names_the_setting(tmp_path):
    with pytest.raises(StageError, match=r"none at .*python3 \(deploy.stub_python=.*python3.12\)"):
        stub_python.probe(str(tmp_path / "python3.12"))


def test_a_broken_stub_python_shows_its_error(tmp_path):
    python3 = fake_python3(tmp_path / "bin", "echo 'libpython3.99.so: cannot open' >&2; exit 127")
    with pytest.raises(StageError, match="exited 127 .*libpython3.99.so: cannot open"):
        stub_python.probe(str(python3))


def test_stub_env_sees_this_env_but_the_hidden_modules(tmp_path):
    import yaml  # noqa: F401  (present here, hidden there)

    python3 = stub_env.create(tmp_path / "env", hide=("yaml",))
    assert python3 == tmp_path / "env" / "bin" / "python3"
    probed = stub_python.probe(str(python3))
    assert (probed.bin_dir, probed.numpy) == (python3.parent, numpy.__version__)
    script = "import pipeline, torch\ntry:\n import yaml\nexcept ImportError:\n print('hidden')"
    result = subprocess.run([python3, "-E", "-c", script], capture_output=True, text=True)
    assert result.stdout.strip() == "hidden", result.stderr
    assert not list(tmp_path.glob(".env.tmp-*"))
    with pytest.raises(StageError, match="exists; remove it"):
        stub_env.create(tmp_path / "env")
