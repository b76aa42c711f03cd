"""Files servesim writes: atomically, so a reader sees the old content or the whole new one."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write a file so that readers see the old content or the whole new one, never a part."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """``write_text_atomic`` for bytes (a temporary file in the same folder, fsync, rename)."""
    with atomic_file(path) as f:
        f.write(data)
    return Path(path)


@contextmanager
def atomic_file(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file to stream into that appears at ``path`` only when the block ends without an
    error (a temporary file in the same folder, fsync, rename); on an error nothing is left."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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


__all__ = ["atomic_file", "file_lock", "write_bytes_atomic", "write_text_atomic"]
