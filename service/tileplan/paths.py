"""Checks on the files and directories a command will write, made before its work starts: a bad `--out` is one
line naming the flag and the reason (exit 2), not a traceback after minutes of planning."""

from __future__ import annotations

import os
from pathlib import Path

from tileplan.errors import InputError


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def writable_file(path: str, flag: str) -> Path:
    """`path` as a file the command may create or replace: not a directory, in an existing writable directory."""
    p = Path(path)
    if p.is_dir():
        raise InputError((flag,), f"{path} is a directory, not a file")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError((flag,), f"cannot write {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise InputError((flag,), f"cannot write {path}: permission denied")
    return p


def writable_dir(path: str, flag: str) -> Path:
    """`path` as a directory the command writes into, created (with its parents) if missing."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError((flag,), f"{path} exists and is not a directory (give a directory for the outputs)")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError((flag,), f"cannot create the directory {path}: {_reason(exc)}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise InputError((flag,), f"cannot write into {path}: permission denied")
    return p
