"""Extracting tar archives (model artifacts, generated modules) safely on every Python we support.

`tarfile`'s extraction filters (`extractall(filter="data")`) exist from Python 3.11.4 on; Debian bookworm ships
3.11.2, where the argument is a TypeError. So the members are checked here before anything is written: no absolute
names, no `..`, no device or FIFO members, and links only to places inside the destination. Where the filter
exists it is applied as well.
"""

from __future__ import annotations

import tarfile
from pathlib import Path, PurePosixPath


class UnsafeArchive(ValueError):
    """A member would land outside the destination, or is not a plain file, directory or inner link."""


def _inside(root: Path, target: Path) -> bool:
    return target == root or root in target.parents


def check_members(tar: tarfile.TarFile, dest: Path) -> None:
    """Raise UnsafeArchive naming the first member that is not safe to extract into `dest`."""
    root = dest.resolve()
    for m in tar.getmembers():
        name = PurePosixPath(m.name)
        if name.is_absolute() or ".." in name.parts:
            raise UnsafeArchive(f"member {m.name!r}: absolute or parent-relative name")
        if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
            raise UnsafeArchive(f"member {m.name!r}: not a file, directory or link")
        target = (root / name).resolve()
        if not _inside(root, target):
            raise UnsafeArchive(f"member {m.name!r}: outside the destination")
        if m.issym() or m.islnk():
            link = PurePosixPath(m.linkname)
            if link.is_absolute():
                raise UnsafeArchive(f"member {m.name!r}: link to an absolute path")
            base = (root / name).parent if m.issym() else root
            if not _inside(root, (base / link).resolve()):
                raise UnsafeArchive(f"member {m.name!r}: link outside the destination")


def extract(tar: tarfile.TarFile, dest: Path) -> None:
    """Extract every member of `tar` into `dest` after checking them all (nothing is written if one is unsafe)."""
    dest.mkdir(parents=True, exist_ok=True)
    check_members(tar, dest)
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
    else:  # Python < 3.11.4: the members were checked above
        tar.extractall(dest)
