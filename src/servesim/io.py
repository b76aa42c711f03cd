"""Files servesim writes: checked before any work, written atomically, all or nothing.

The one rule for every output a command writes:

* ``check_output(path, flag)`` says before any work whether ``path`` can be written (its folder
  is a folder or can be created, the name is a valid file name, not a folder), naming the flag;
* ``atomic_file`` / ``write_text_atomic`` write through a temporary file in the same folder and a
  rename, so a reader sees the old content or the whole new one, never a part;
* inside ``output_transaction()`` (the CLI wraps every command that writes in one) those renames
  wait for the end of the block: when the command fails, none of its files appears and any folder
  it created is removed again, so nothing new is left;
* files get the user's umask (0644 by default), not ``mkstemp``'s 0600.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from servesim.errors import InputError, shown


def current_umask() -> int:
    """The process's umask, read without changing it (``/proc``; the set-and-restore dance as a
    fallback, which is not thread-safe, where there is no ``/proc``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):  # pragma: no cover - not Linux
        pass
    mask = os.umask(0o022)  # pragma: no cover
    os.umask(mask)  # pragma: no cover
    return mask  # pragma: no cover


def file_mode() -> int:
    """The mode a new file gets from ``open(path, "w")``: 0666 less the umask."""
    return 0o666 & ~current_umask()


def check_output(path: str | Path | None, flag: str, *, folder: bool = False) -> None:
    """Refuse before any work an output path that cannot be written: an empty or invalid name, a
    folder where a file is meant (or a file where a folder is meant with ``folder=True``), or a
    parent that is a file or not writable. Raises ``InputError`` naming ``flag``."""
    if path is None:
        return
    text = str(path)
    where = f"{flag} {shown(text)}"
    if not text.strip():
        raise InputError(f"{flag}: the file name is empty")
    if "\0" in text:
        raise InputError(f"{where}: a file name cannot contain a NUL character")
    target = Path(text)
    if not folder and (text.endswith(os.sep) or target.name in ("", ".", "..")):
        raise InputError(f"{where}: names a folder, not a file")
    if len(os.fsencode(target.name)) > 255:
        raise InputError(f"{where}: the file name is longer than 255 bytes")
    if target.exists():
        if target.is_dir() and not folder:
            raise InputError(f"{where}: is a folder, not a file")
        if folder and not target.is_dir():
            raise InputError(f"{where}: is a file, not a folder")
        if not os.access(target if folder else target.parent, os.W_OK | os.X_OK):
            raise InputError(f"{where}: permission denied")
        return
    parent = target.parent
    while not parent.exists():
        if parent == parent.parent:  # pragma: no cover - the root always exists
            break
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{where}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{where}: {parent} is not writable (permission denied)")


def check_outputs(paths: dict[str, str | Path | None]) -> None:
    """``check_output`` for each ``flag -> path``, and no two flags naming the same file."""
    seen: dict[Path, str] = {}
    for flag, path in paths.items():
        if path is None:
            continue
        check_output(path, flag)
        key = Path(os.path.abspath(path))
        if key in seen:
            raise InputError(f"{seen[key]} and {flag} name the same file {shown(str(path))}")
        seen[key] = flag


@dataclass
class _Transaction:
    """Files written so far (temporary name -> target) and folders created for them."""

    staged: list[tuple[Path, Path]] = field(default_factory=list)
    made_dirs: list[Path] = field(default_factory=list)

    def commit(self) -> None:
        for tmp, target in self.staged:
            os.replace(tmp, target)
        self.staged.clear()
        self.made_dirs.clear()

    def abort(self) -> None:
        for tmp, _ in self.staged:
            tmp.unlink(missing_ok=True)
        self.staged.clear()
        _remove_dirs(self.made_dirs)


_transaction: ContextVar[_Transaction | None] = ContextVar("servesim_outputs", default=None)


@contextmanager
def output_transaction() -> Iterator[None]:
    """Every ``atomic_file`` written inside the block appears only when the block ends without an
    error (``typer.Exit(0)`` counts as success); on an error none does, and the folders created
    for them are removed. Nested blocks join the outer one."""
    if _transaction.get() is not None:
        yield
        return
    tx = _Transaction()
    token = _transaction.set(tx)
    try:
        yield
    except BaseException as exc:
        if getattr(exc, "exit_code", 1) in (0, None):  # click/typer's Exit(0): a clean end
            tx.commit()
        else:
            tx.abort()
        raise
    else:
        tx.commit()
    finally:
        _transaction.reset(token)
        tx.abort()  # whatever a commit left (a rename that failed half-way)


def _make_parents(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; the ones created, deepest first."""
    missing = []
    p = folder
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def _remove_dirs(dirs: list[Path]) -> None:
    for d in dirs:  # deepest first; only if empty (another writer may have used it)
        with suppress(OSError):
            d.rmdir()


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write a file so that readers see the old content or the whole new one, never a part."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """``write_text_atomic`` for bytes (a temporary file in the same folder, fsync, rename)."""
    with atomic_file(path) as f:
        f.write(data)
    return Path(path)


@contextmanager
def staged_path(path: str | Path) -> Iterator[Path]:
    """A temporary name beside ``path`` for a tool that writes by name (a browser's PDF, a
    writer that opens its own file); it is renamed to ``path`` when the block ends without an
    error (at the end of an ``output_transaction`` inside one), removed otherwise."""
    target = Path(path)
    made = _make_parents(target.parent)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    tx = _transaction.get()
    try:
        yield tmp
        with open(tmp, "rb") as f:  # on disk before the rename (a crash leaves old or new)
            os.fsync(f.fileno())
        os.chmod(tmp, file_mode())
        if tx is None:
            os.replace(tmp, target)
        else:
            tx.staged.append((tmp, target))
            tx.made_dirs[:0] = made
    except BaseException:
        tmp.unlink(missing_ok=True)
        _remove_dirs(made)
        raise


@contextmanager
def atomic_file(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file to stream into that appears at ``path`` only when the block ends without an
    error (a temporary file in the same folder, fsync, rename; inside an ``output_transaction``
    the rename waits for the transaction's end); on an error nothing is left."""
    with staged_path(path) as tmp, open(tmp, "wb") as f:
        yield f


@contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """Hold an exclusive advisory lock (``flock``) on ``path`` (created if missing): processes
    that must not interleave a read-then-write take turns on it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


__all__ = [
    "atomic_file",
    "check_output",
    "check_outputs",
    "current_umask",
    "file_lock",
    "file_mode",
    "output_transaction",
    "staged_path",
    "write_bytes_atomic",
    "write_text_atomic",
]
