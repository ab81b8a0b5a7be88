"""tileplan.archives.extract: the members are checked on every Python (bookworm's 3.11.2 has no extraction
filters), so an archive that would write outside its destination is refused before anything is written."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from tileplan.archives import UnsafeArchive, extract


def _tar(*members: tuple[str, str, str]) -> tarfile.TarFile:
    """members: (kind, name, payload): kind "file" (payload = content), "sym"/"hard" (payload = link target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for kind, name, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = payload.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                info.linkname = payload
                tar.addfile(info)
    buf.seek(0)
    return tarfile.open(fileobj=buf, mode="r")


def test_plain_files_and_inner_links_are_extracted(tmp_path: Path) -> None:
    extract(_tar(("file", "m/a.c", "int x;"), ("sym", "m/b.c", "a.c")), tmp_path / "out")
    assert (tmp_path / "out" / "m" / "a.c").read_text() == "int x;"
    assert (tmp_path / "out" / "m" / "b.c").read_text() == "int x;"


@pytest.mark.parametrize("members", [
    [("file", "/etc/evil", "x")],
    [("file", "m/../../evil", "x")],
    [("sym", "m/link", "../../outside")],
    [("sym", "m/link", "/etc/passwd")],
    [("hard", "m/link", "../outside")],
])
def test_escaping_members_are_refused_before_anything_is_written(tmp_path: Path,
                                                                 members: list[tuple[str, str, str]]) -> None:
    dest = tmp_path / "out"
    with pytest.raises(UnsafeArchive):
        extract(_tar(("file", "m/first.c", "int x;"), *members), dest)
    assert not (dest / "m" / "first.c").exists()
    assert not (tmp_path / "evil").exists() and not (tmp_path / "outside").exists()
