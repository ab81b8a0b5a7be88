"""TVM imported inside `one_listing_of_global_functions` (the compile's import) fills its `_ffi_api` modules with
the same functions as a plain import, listing the registry's names fewer times."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = """
import json, os, sys
os.environ["TVM_DEVICE_BACKEND_AUTOLOAD"] = "0"
import tvm_ffi.registry as reg
listings = [0]  # names read from the registry's listing functor
real = reg.get_global_func
def counting(name, *a, **k):
    f = real(name, *a, **k)
    if name != "ffi.FunctionListGlobalNamesFunctor":
        return f
    def make():
        functor = f()
        def read(i):
            listings[0] += 1
            return functor(i)
        return read
    return make
reg.get_global_func = counting
if sys.argv[1] == "once":
    from tileplan.frontend.compile import one_listing_of_global_functions
    with one_listing_of_global_functions():
        import tvm
        import tvm.relax.frontend.onnx
    assert reg.list_global_func_names.__name__ == "list_global_func_names"  # put back
else:
    import tvm
    import tvm.relax.frontend.onnx
apis = {m: sorted(dir(mod)) for m, mod in sys.modules.items() if m.endswith("_ffi_api") and mod is not None}
print(json.dumps({"apis": apis, "listings": listings[0]}))
"""


def _run(mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_the_ffi_modules_are_the_same_with_one_listing():
    plain, once = _run("plain"), _run("once")
    assert len(plain["apis"]) > 20 and sum(len(v) for v in plain["apis"].values()) > 1000
    assert once["apis"] == plain["apis"]
    assert plain["listings"] > 20 * 1000  # every name, once per _ffi_api module
    assert 0 < once["listings"] < plain["listings"] / 5
