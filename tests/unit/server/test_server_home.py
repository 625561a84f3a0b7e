"""The wheel's tritonserver prepared for this interpreter; a stub without its libpython is refused
before Triton could hang on it."""

import shutil
import subprocess
from pathlib import Path

import pytest
import pytriton

from pipeline.errors import StageError
from pipeline.server.server_home import ServerHome, check_stub_libraries, prepare_home
from pipeline.server.stub_python import probe

STUBS = Path(pytriton.__file__).parent / "tritonserver" / "python_backend_stubs"


def test_prepared_home_has_the_server_and_this_pythons_stub(tmp_path):
    home = prepare_home(tmp_path, probe())
    assert home.binary.is_file()
    assert (home.backends_dir / "python" / "triton_python_backend_stub").is_file()
    assert prepare_home(tmp_path, probe()) == home  # copied once, reused


def test_stub_without_its_libpython_is_refused(tmp_path):
    def loads(version: str) -> bool:
        stub = STUBS / version / "triton_python_backend_stub"
        return (
            "not found"
            not in subprocess.run(["ldd", str(stub)], capture_output=True, text=True).stdout
        )

    missing = next((v for v in ("3.8", "3.9", "3.10", "3.12") if not loads(v)), None)
    if missing is None:
        pytest.skip("every stub's libpython is installed here")
    real = prepare_home(tmp_path / "real", probe())
    home = ServerHome(root=tmp_path / "home", libs_dir=real.libs_dir, python=real.python)
    (home.backends_dir / "python").mkdir(parents=True)
    shutil.copy2(
        STUBS / missing / "triton_python_backend_stub",
        home.backends_dir / "python" / "triton_python_backend_stub",
    )
    with pytest.raises(StageError, match=f"cannot load \\['libpython{missing}.so.1.0'\\]"):
        check_stub_libraries(home)
