"""Output files that are never overwritten and never left half-written (R-G1, issue 8).

`check_new_file(path, flag)` is the start-up check (the directory exists, is a directory and is
writable; the name is free), run before any work so that a finished result is never lost to a bad
output path. `write_new_file(path, data, flag)` writes the bytes to a temporary file in the same
directory (fsync'ed) and then hard-links it to the final name: `os.link` fails if the name
appeared meanwhile, so a concurrent writer is never overwritten, and a crash leaves either no
file or a complete one (at most a stray `.NAME.*.tmp`, removed on every error path). On a file
system without hard links the name is claimed with O_EXCL and the temporary file renamed over it.
`replace_file(path, data)` is the atomic *replacing* write, for a command's own resumable outputs.
This module imports nothing of adaspec but the errors.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import InputFileError


def exists_error(p: Path, flag: str, what: str = "file", error=InputFileError) -> Exception:
    kind = "a directory" if p.is_dir() else "a file"
    return error(f"{flag}={p}: {str(p)!r} already exists ({kind}), and a {what} is never overwritten. "
                 f"Fix: choose a new name for {flag} (or move the old one away)", param=flag)


def check_new_file(path: str | os.PathLike, flag: str, what: str = "file", error=InputFileError) -> Path:
    """Refuse an output path whose directory is missing or read-only, or whose name is taken."""
    p = Path(path).expanduser()
    if str(path).endswith(os.sep) or p.name in ("", ".", ".."):
        raise error(f"{flag}={path}: names a directory; pass a file name, e.g. {flag}={Path(path) / 'out.json'}",
                    param=flag)
    parent = p.parent
    if not parent.exists():
        raise error(f"{flag}={p}: directory {str(parent)!r} does not exist. Fix: create it first "
                    f"(mkdir -p {parent}) or choose another {flag}", param=flag)
    if not parent.is_dir():
        raise error(f"{flag}={p}: {str(parent)!r} is a file, not a directory. Fix: choose another {flag}",
                    param=flag)
    if p.exists() or p.is_symlink():
        raise exists_error(p, flag, what, error)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise error(f"{flag}={p}: directory {str(parent)!r} is not writable. Fix: choose another {flag}",
                    param=flag)
    return p


def write_new_file(path: str | os.PathLike, data: bytes, flag: str, what: str = "file",
                   error=InputFileError) -> Path:
    """Write `data` to a new file at `path`: never overwrites, never leaves a partial file."""
    p = check_new_file(path, flag, what, error)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _usual_mode(tmp)
        _publish(tmp, p, flag, what, error)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    fsync_dir(p.parent)
    return p


def replace_file(path: str | os.PathLike, data: bytes) -> Path:
    """Atomically write `data` at `path`, replacing what is there (a temporary file, then os.replace)."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _usual_mode(tmp)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return p


def _usual_mode(tmp: str) -> None:
    """mkstemp creates 0600; a result file gets the mode an ordinary open() would give it."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)


def _publish(tmp: str, p: Path, flag: str, what: str, error) -> None:
    """Give the complete temporary file its final name, failing if that name exists."""
    try:
        os.link(tmp, p)
        return
    except FileExistsError:
        raise exists_error(p, flag, what, error) from None
    except OSError:
        pass  # no hard links here (some FUSE/network file systems): claim the name, then rename over it
    try:
        fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        raise exists_error(p, flag, what, error) from None
    os.close(fd)
    try:
        os.replace(tmp, p)
    except BaseException:
        os.unlink(p)
        raise


def fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
