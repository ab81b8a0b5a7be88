"""What the client writes as a tar the service sent: checked first, then written whole or not at all.

A program (`save_artifact`) and a module tar (`Module.save`) are packed by the service as one top directory of
regular files. A broken or hostile server could send anything with a 200: a proxy's page, or a tar whose members
climb out of the directory it is later extracted into (`../`, absolute names, links). Such an answer is a
ServiceError and nothing is written.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from collections.abc import Iterable

PROGRAM_FILES = ("tileplan.json", "Makefile")  # what every program's top directory holds


def check_tar(data: bytes, what: str, required: Iterable[str] = ()) -> None:
    """ServiceError unless `data` is an uncompressed tar of regular files (and directories) under one top directory,
    with no absolute or `..` names, holding each of `required` (paths under the top directory)."""
    from tileplan_client.errors import ServiceError

    def bad(why: str) -> ServiceError:
        return ServiceError(f"the service's {what} is not a tar as the service packs one: {why}; nothing was written")

    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            members = tar.getmembers()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise bad(f"not a tar archive ({type(exc).__name__})") from None
    tops, names = set(), set()
    for m in members:
        parts = m.name.split("/")
        if m.name.startswith("/") or ".." in parts:
            raise bad(f"member {m.name[:200]!r} is absolute or climbs out")
        if not (m.isfile() or m.isdir()):
            raise bad(f"member {m.name[:200]!r} is not a file or directory")
        tops.add(parts[0])
        names.add("/".join(p for p in parts[1:] if p not in ("", ".")))
    if len(tops) != 1:
        raise bad(f"{len(tops)} top directories (one expected)")
    missing = set(required) - names
    if missing:
        raise bad(f"no {' or '.join(sorted(missing))}")


def write_checked(data: bytes, path: str | os.PathLike[str], what: str, required: Iterable[str] = ()) -> str:
    """`data` checked (`check_tar`), then written to `path` whole or not at all (a file beside it, renamed)."""
    check_tar(data, what, required)
    target = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=".tileplan-", suffix=".tmp", dir=os.path.dirname(target) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    return target
