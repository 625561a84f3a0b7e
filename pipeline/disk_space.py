"""Out-of-space failures, recognised whichever writer hit them.

Python's own writers (open/json, numpy, shutil) raise OSError with errno ENOSPC or EDQUOT. The
safetensors writer raises `SafetensorError("... No space left on device (os error 28)")`, not an
OSError; shutil.copytree gathers its OSErrors into one `shutil.Error` of strings; torch.save's
zip writer raises `RuntimeError("[enforce fail at inline_container.cc] unexpected pos ...")` with
no errno at all, and numpy.save to a path an errno-less OSError. Each is recognised here, so a
stage that fills its disk ends on one line.
"""

import errno
import re
import shutil
from os import PathLike
from pathlib import Path

OUT_OF_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# what the messages of writers that drop the errno still say (Rust's io::Error, strerror)
OUT_OF_SPACE_TEXT = (
    f"os error {errno.ENOSPC}",
    f"os error {errno.EDQUOT}",
    "no space left on device",
    "disk quota exceeded",
)
# writers that report a short write without its errno: torch.save's zip writer (a position
# mismatch) and numpy's tofile ("N requested and M written")
SHORT_WRITE = re.compile(
    r"inline_container\.cc|PytorchStreamWriter failed writing|\d+ requested and \d+ written"
)
# below this many bytes free, a short write is the disk being full
NEARLY_FULL_BYTES = 1 << 20


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_out_of_space(exc: BaseException, written_dir: Path | None = None) -> bool:
    """Whether `exc` (or an exception it was raised from) means the disk or quota ran out;
    `written_dir` is where the writer wrote, checked for free space when the error carries no
    errno (torch.save, numpy.save)."""
    for err in _chain(exc):
        if isinstance(err, OSError) and err.errno in OUT_OF_SPACE_ERRNOS:
            return True
        text = str(err).lower()
        if any(marker in text for marker in OUT_OF_SPACE_TEXT):
            return True
        if written_dir is not None and SHORT_WRITE.search(str(err)):
            try:
                return shutil.disk_usage(written_dir).free < NEARLY_FULL_BYTES
            except OSError:
                return False
    return False


def file_being_written(exc: BaseException, written_dir: Path) -> str | None:
    """The file the failed write was for: the one the error names, else the path under
    `written_dir` that the failing writer was given (safetensors removes its partial file and
    names none), else the newest file there (the partial one the writer left)."""
    for err in _chain(exc):
        if isinstance(err, OSError) and err.filename:
            return str(err.filename)
    written_dir = Path(written_dir)
    for err in _chain(exc):
        path = _path_argument(err, written_dir)
        if path is not None:
            return path
    try:
        files = [p for p in written_dir.rglob("*") if p.is_file()]
    except OSError:
        return None
    if not files:
        return None
    return str(max(files, key=lambda p: p.stat().st_mtime_ns))


def _path_argument(exc: BaseException, written_dir: Path) -> str | None:
    """The innermost frame's path-like local that lies under `written_dir`."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            if isinstance(value, (str, PathLike)):
                path = Path(value)
                if path.is_relative_to(written_dir) and path != written_dir:
                    return str(path)
    return None
