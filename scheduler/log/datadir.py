"""The data directory: its layout and its on-disk format version."""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass

import orjson

from apollo11.scheduler.errors import FormatVersionError

FORMAT_FILE = "FORMAT"
FORMAT_NAME = "apollo11-data"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class DataDir:
    """<root>/FORMAT, <root>/log/*.seg|*.idx, <root>/snapshots/."""

    root: str

    @property
    def log_dir(self) -> str:
        return os.path.join(self.root, "log")

    @property
    def snapshot_dir(self) -> str:
        return os.path.join(self.root, "snapshots")

    @classmethod
    def open(cls, root: str | os.PathLike[str]) -> DataDir:
        """Open `root`, creating a new data directory when it is missing or empty."""
        d = cls(os.fspath(root))
        os.makedirs(d.root, exist_ok=True)
        fmt = os.path.join(d.root, FORMAT_FILE)
        if os.path.exists(fmt):
            d._check_format(fmt)
        else:
            if os.path.isdir(d.log_dir) and os.listdir(d.log_dir):
                raise FormatVersionError(
                    f"{d.root} holds log files but no {FORMAT_FILE} file; refusing to guess "
                    f"its format"
                )
            write_atomic(fmt, orjson.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION}))
        os.makedirs(d.log_dir, exist_ok=True)
        os.makedirs(d.snapshot_dir, exist_ok=True)
        return d

    @classmethod
    def open_existing(cls, root: str | os.PathLike[str]) -> DataDir:
        """Open a data directory that must already exist; never create anything."""
        d = cls(os.fspath(root))
        fmt = os.path.join(d.root, FORMAT_FILE)
        if not os.path.exists(fmt):
            raise FormatVersionError(
                f"{d.root} is not an Apollo-11 data directory (no {FORMAT_FILE})"
            )
        d._check_format(fmt)
        return d

    def _check_format(self, path: str) -> None:
        try:
            with open(path, "rb") as f:
                info = orjson.loads(f.read())
            name, version = info["format"], info["version"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise FormatVersionError(f"{path} is unreadable: {e}") from e
        if name != FORMAT_NAME:
            raise FormatVersionError(f"{self.root} is not an Apollo-11 data directory ({name!r})")
        if version != FORMAT_VERSION:
            raise FormatVersionError(
                f"{self.root} uses on-disk format version {version}; this build of Apollo-11 "
                f"reads version {FORMAT_VERSION} only. Use a matching release."
            )

    def fsync_log_dir(self) -> None:
        fsync_dir(self.log_dir)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_beside(path: str) -> str:
    """A new empty file beside `path`, named `<name>.<random>.tmp`, for a write that
    renames it over `path`: each writer its own, so two writes of one path (a merge
    and a redaction rewriting the same chunk) never truncate or rename each other's
    half. Its mode is a data file's (mkstemp's own is 0600)."""
    directory, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f"{name}.", suffix=".tmp", dir=directory or ".")
    try:
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    return tmp


def write_atomic(path: str, data: bytes, *more: bytes) -> None:
    """temp file, fsync, rename, fsync the directory: all or nothing. `data` and then
    `more`, written one after the other (not joined first: a copy of a big file)."""
    tmp = temp_beside(path)
    try:
        with open(tmp, "wb") as f:
            for part in (data, *more):
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # a full disk must not keep the half
            os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(path) or ".")
