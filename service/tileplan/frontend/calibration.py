"""Calibration data for `options.quantize` (`tileplan compile --calibration`, POST /compile's `calibration`): an
.npz with one array per model input, samples along the first axis.

A client's .npz is a zip of .npy files, and both formats declare sizes that the readers trust: a zip member
decompresses to its declared size (a 1 MB member can declare a GiB of zeros), and numpy allocates an array of the
shape its .npy header declares before reading the data. So `calibration_index` reads only the zip's directory and
each member's .npy header, and refuses, before anything is decompressed or allocated: too many members, declared
sizes over the budget, a header whose shape does not match the member's declared size, dtypes that are not plain
numbers (no objects, so no pickles), and more samples than a calibration can use. `read_calibration` loads the
arrays only after that.
"""

from __future__ import annotations

import io
import math
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from tileplan.errors import InputError

MAX_CALIBRATION_BYTES = 256 * 1024 * 1024  # decompressed, all arrays together
MAX_CALIBRATION_SAMPLES = 1024  # MinMax calibration gains nothing from more
MAX_MEMBERS = 64  # one array per model input
_NUMERIC_KINDS = "biuf"  # bool, signed, unsigned, floating


@dataclass(frozen=True)
class CalibrationArray:
    name: str
    shape: tuple[int, ...]
    dtype: str


def calibration_index(data: bytes, loc: tuple[str, ...] = ("calibration",), *,
                      max_bytes: int = MAX_CALIBRATION_BYTES,
                      max_samples: int = MAX_CALIBRATION_SAMPLES) -> dict[str, CalibrationArray]:
    """The arrays an .npz declares (name -> shape, dtype), checked from the zip's directory and the .npy headers
    alone. InputError at `loc` for anything that is not a bounded .npz of numeric arrays with one sample count."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise InputError(loc, f"not an .npz of arrays: {exc}") from None
    with zf:
        members = zf.infolist()
        if not members:
            raise InputError(loc, "an empty .npz: expected one array per model input")
        if len(members) > MAX_MEMBERS:
            raise InputError(loc, f"{len(members)} arrays; at most {MAX_MEMBERS} (one per model input)")
        declared = sum(m.file_size for m in members)
        if declared > max_bytes:
            raise InputError(loc, f"the arrays declare {declared:,} bytes uncompressed; at most {max_bytes:,} bytes "
                             "on this server")
        out: dict[str, CalibrationArray] = {}
        for m in members:
            if not m.filename.endswith(".npy") or m.is_dir():
                raise InputError(loc, f"member {m.filename!r} is not an .npy array (an .npz written by numpy.savez "
                                 "holds only those)")
            name = m.filename[: -len(".npy")]
            out[name] = _header(zf, m, name, loc)
    counts = {a.shape[0] for a in out.values()}
    if len(counts) != 1 or 0 in counts:
        raise InputError(loc, "expected one array per input, all with the same number (> 0) of samples along the "
                         f"first axis; got {', '.join(f'{a.name}: {list(a.shape)}' for a in out.values())}")
    samples = counts.pop()
    if samples > max_samples:
        raise InputError(loc, f"{samples:,} samples; at most {max_samples:,} (MinMax calibration gains nothing from "
                         "more)")
    return out


def _header(zf: zipfile.ZipFile, member: zipfile.ZipInfo, name: str, loc: tuple[str, ...]) -> CalibrationArray:
    fmt = np.lib.format
    try:
        with zf.open(member) as f:
            version = fmt.read_magic(f)
            reader = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, _fortran, dtype = reader(f, max_header_size=4096)
            header_bytes = f.tell()
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, NotImplementedError, RuntimeError) as exc:
        raise InputError(loc, f"array {name!r}: not an .npy array ({exc})") from None
    if dtype.hasobject or dtype.kind not in _NUMERIC_KINDS or dtype.fields is not None:
        raise InputError(loc, f"array {name!r}: dtype {dtype} is not a plain numeric dtype (bool, int, uint, float)")
    if not shape:
        raise InputError(loc, f"array {name!r} is a scalar: samples go along the first axis")
    nbytes = math.prod(shape) * dtype.itemsize
    if header_bytes + nbytes != member.file_size:
        raise InputError(loc, f"array {name!r}: its header declares shape {list(shape)} of {dtype} ({nbytes:,} "
                         f"bytes) but the member holds {member.file_size - header_bytes:,} bytes of data")
    return CalibrationArray(name, tuple(int(d) for d in shape), str(dtype))


def read_calibration(data: bytes, loc: tuple[str, ...] = ("calibration",), *,
                     max_bytes: int = MAX_CALIBRATION_BYTES,
                     max_samples: int = MAX_CALIBRATION_SAMPLES) -> list[dict[str, np.ndarray]]:
    """The checked .npz -> one feed per sample ({input name: array}), views of the loaded arrays."""
    index = calibration_index(data, loc, max_bytes=max_bytes, max_samples=max_samples)
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays: dict[str, Any] = {k: z[k] for k in index}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(loc, f"not an .npz of arrays: {exc}") from None
    for k, a in arrays.items():  # (MinMax calibration of inf or NaN makes a scale of inf or NaN: a 500 in the compile)
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise InputError((*loc, k), f"array {k!r} holds values that are not finite (inf or NaN): calibration "
                             "data is samples of the model's inputs", "value_error")
    samples = next(iter(index.values())).shape[0]
    return [{k: a[i] for k, a in arrays.items()} for i in range(samples)]
