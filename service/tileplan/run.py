"""`python -m tileplan.run ARTIFACT.tar --input in.npy --output out.npy [--json]` (also `tileplan run`): build a
compiled model's host target, run the whole model on the emulator, write its output and print every step's
emulated cycles.  Exit codes: 0 success, 2 bad input (one line naming the field), 1 anything else."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tileplan.errors import InputError


def _read_inputs(specs: list[str]) -> dict[str, np.ndarray]:
    """`FILE.npy` (the only input), `NAME=FILE.npy` (repeatable) or one `FILE.npz` (arrays by input name)."""
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        name, eq, path = spec.partition("=")
        if not eq:
            name, path = "", spec
        try:
            if path.endswith(".npz"):
                with np.load(path) as z:
                    out.update({k: z[k] for k in z.files})
                continue
            out[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(("input", name or path), f"cannot read {path}: {exc}") from None
    if "" in out and len(out) > 1:
        raise InputError(("input",), "name every input (NAME=FILE.npy) when giving several")
    return out


def compare(model: str, feeds: dict[str, np.ndarray], got: dict[str, np.ndarray], references: list[str]
            ) -> list[dict[str, Any]]:
    """The agreement of `got` with onnxruntime on `model` under each named reference (frontend.reference)."""
    from tileplan.frontend import reference as ref

    try:
        data = Path(model).read_bytes()
    except OSError as exc:
        raise InputError(("compare",), f"cannot read {model}: {exc.strerror}") from None
    try:
        steps = ref.output_steps(data)
    except Exception as exc:  # noqa: BLE001 - onnx's decode errors have no common base
        raise InputError(("compare",), f"{model} is not an ONNX model: {exc}") from None
    out = []
    for name in references:
        try:
            want = ref.reference_outputs(data, feeds, name)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types for every failure
            raise InputError(("compare",), f"onnxruntime cannot run {model} on this input: {exc}") from None
        if set(want) != set(got):
            raise InputError(("compare",), f"{model}'s outputs {sorted(want)} are not the artifact's {sorted(got)}")
        out.append({"reference": name, **ref.agreement(got, want, steps)})
    return out


def run_command(artifact: str, inputs: list[str], output: str | None, as_json: bool, compare_with: str | None = None,
                references: list[str] | None = None) -> int:
    from tileplan.frontend.runner import emulate_files, read_artifact
    from tileplan.paths import writable_file

    try:
        data = Path(artifact).read_bytes()
    except OSError as exc:
        raise InputError(("artifact",), f"cannot read {artifact}: {exc.strerror}") from None
    if output:  # before the run, not after it
        writable_file(output, "output")
    files = read_artifact(data)
    try:
        names = [s["name"] for s in json.loads(files["tileplan.json"])["inputs"]]
    except (ValueError, KeyError, TypeError):
        raise InputError(("artifact",), f"{artifact}: its tileplan.json does not list the model's inputs") from None
    feeds = _read_inputs(inputs)
    unknown = sorted(set(feeds) - set(names) - {""})
    if unknown:
        raise InputError(("input", unknown[0]), f"the model has no input of that name; its inputs are "
                                                f"{', '.join(names)}")
    if "" in feeds:
        feeds = {"__only__": feeds.pop("")}
    result = emulate_files(files, feeds)
    judged: list[dict[str, Any]] = []
    if compare_with:
        named = {(names[0] if k == "__only__" else k): v for k, v in feeds.items()}
        judged = compare(compare_with, named, result.outputs, references or ["ort-int8", "ort", "ort-noopt"])
    if output:
        if output.endswith(".npz") or len(result.outputs) > 1:
            savez: Any = np.savez
            savez(output, **result.outputs)
        else:
            np.save(output, next(iter(result.outputs.values())))
    if as_json:
        doc: dict[str, Any] = {
            "outputs": [{"name": k, "shape": list(v.shape), "dtype": str(v.dtype)} for k, v in result.outputs.items()],
            "steps": [{**s, "cycles_emulated": (int(round(c)) if s["kind"] == "accel" else None)}
                      for s, c in zip(result.steps, result.cycles)],
            "cycles_emulated": int(round(result.accelerator_cycles())),
        }
        if judged:
            doc["compare"] = judged
        print(json.dumps(doc, indent=2))
    else:
        print(result.table())
        for j in judged:
            print(f"vs {j['reference']}: {j['elements']} outputs, {j['equal']:.2%} equal, {j['within1']:.2%} within "
                  f"1 LSB, max {j['max']:.0f} LSB")
    if judged:
        from tileplan.frontend.reference import meets_bar

        return 0 if meets_bar(judged[0]) else 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tileplan.run ...` is `tileplan run ...`: one parser and one error convention for the verb."""
    from tileplan.cli import main as cli_main

    return cli_main(["run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
