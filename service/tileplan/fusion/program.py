"""Fused groups in a whole-model program: the member steps (and the host steps between them, each an activation
the fused kernel applies on chip) become one accelerator step running the group's fused kernel."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tileplan.fusion import dw_kernel, ir_kernel, kernel


@dataclass
class FusedKernel:
    name: str  # C symbol
    source: str
    members: list[str]


def _readers(prog: Any, t: Any, skip: set[int]) -> int:
    n = sum(1 for i, st in enumerate(prog.steps) if i not in skip for x in st.inputs if x is t)
    return n + sum(1 for _, src in prog.copies if src is t)


def apply(prog: Any, groups: list[Any], specs: dict[str, Any], target: Any, max_bytes: int, hw_name: str
          ) -> list[FusedKernel]:
    """Replace every fused group's steps in `prog` (groups of two members, `plan.kernel`); a group whose steps
    are not a clean chain in the program (another reader of the intermediate) is marked not fused with that
    reason.  Re-plans the arena and the weights."""
    from tileplan.frontend.program import Step, Tensor, place_weights, plan_arena

    made: list[FusedKernel] = []
    dropped: set[int] = set()
    next_id = 1 + max([t.id for st in prog.steps for t in [*st.inputs, *st.outputs, *st.temporaries()]]
                      + [t.id for t in prog.consts] + [t.id for t in prog.outputs] + [0])
    for gi, g in enumerate(groups):
        if not g.fused:
            continue
        by_name = {st.name: i for i, st in enumerate(prog.steps) if st.kind == "accel"}
        idx = [by_name.get(m) for m in g.members]
        why = None
        if any(i is None for i in idx) or any(b is None or a is None or b <= a for a, b in zip(idx, idx[1:])):
            why = "program: the members are not accelerator steps in order"
        else:
            span = set(range(int(idx[0] or 0), int(idx[-1] or 0) + 1))
            for ia, ib in zip(idx, idx[1:]):
                assert ia is not None and ib is not None
                cur = prog.steps[ia].outputs[0]
                for st in prog.steps[ia + 1:ib]:
                    if st.kind != "host" or len(st.inputs) != 1 or st.inputs[0] is not cur or len(st.outputs) != 1:
                        why = f"program: step {st.name} between the members is not the intermediate's activation"
                        break
                    if _readers(prog, cur, span) or cur.kind != "arena":
                        why = "program: the intermediate is read elsewhere"
                        break
                    cur = st.outputs[0]
                if why is None and (prog.steps[ib].inputs[0] is not cur or _readers(prog, cur, span)
                                    or cur.kind != "arena" or len(prog.steps[ib].inputs) != 1):
                    why = "program: a member does not read only the previous one's (activated) output"
                if why is not None:
                    break
        i1, i2 = idx[0], idx[-1]
        if why is not None or i1 is None or i2 is None:
            why = why or "program: the members are not accelerator steps in order"
            g.fused, g.reason = False, "per-layer program kept: " + why
            g.blockers.append(why)
            continue
        s1, s2 = prog.steps[i1], prog.steps[i2]
        sp1, sp2 = specs[g.members[0]], specs[g.members[1]]
        assert g.kernel is not None
        name = f"tpf_group_{gi}"
        args = dict(dim=target.dim, spad_rows=target.spad_rows, acc_rows=target.acc_rows, max_bytes=max_bytes,
                    scale1=g.kernel.scale1, relu1=g.kernel.relu1, scale2=float(sp2.epilogue.scale),
                    relu2=bool(sp2.epilogue.relu), hw_name=hw_name)
        if len(g.members) == 3:
            sp3 = specs[g.members[2]]
            ish = ir_kernel.shape_of(sp1, sp2, sp3)
            assert ish is not None and isinstance(g.kernel.tiling, ir_kernel.IrTiling)
            src = ir_kernel.generate(name, ish, g.kernel.tiling, **{**args, "scale2": g.kernel.scale2,
                                                                    "relu2": g.kernel.relu2,
                                                                    "scale3": float(sp3.epilogue.scale),
                                                                    "relu3": bool(sp3.epilogue.relu)})
            w, b = ir_kernel.prelay(sp1, sp2, sp3, ish, target.dim)
            ws_bytes = ir_kernel.workspace_bytes(ish, target.dim, g.kernel.tiling)
        elif g.kernel.depthwise:
            dsh = dw_kernel.shape_of(sp1, sp2)
            assert dsh is not None and isinstance(g.kernel.tiling, dw_kernel.DwTiling)
            src = dw_kernel.generate(name, dsh, g.kernel.tiling, **args)
            w, b = dw_kernel.prelay(sp1, sp2, dsh, target.dim)
            ws_bytes = dw_kernel.workspace_bytes(dsh, target.dim)
        else:
            sh = kernel.shape_of(sp1, sp2)
            assert sh is not None and isinstance(g.kernel.tiling, kernel.Tiling)
            src = kernel.generate(name, sh, g.kernel.tiling, **args)
            w, b = kernel.prelay(sp1, sp2, sh, target.dim)
            ws_bytes = kernel.workspace_bytes(sh, target.dim)
        wt = Tensor(next_id, "int8", w.shape, "const", data=w, name=f"{name}.W_p")
        bt = Tensor(next_id + 1, "int32", b.shape, "const", data=b, name=f"{name}.bias_p")
        ws = Tensor(next_id + 2, "uint8", (ws_bytes,), "workspace")
        next_id += 3
        prog.consts.extend([wt, bt])
        nodes = [n for st in prog.steps[i1:i2 + 1] for n in st.onnx_nodes]
        fused = Step("accel", "+".join(g.members), name, [s1.inputs[0]], s2.outputs, ws, wt, bt, s2.clamp, s2.timing,
                     nodes, "fused_pointwise_chain")
        dropped |= {id(t) for st in prog.steps[i1:i2 + 1] for t in (st.weights, st.bias, st.multipliers)
                    if t is not None}
        prog.steps[i1:i2 + 1] = [fused]
        made.append(FusedKernel(name, src, list(g.members)))
    # the replaced steps' weights, bias and multipliers leave the weights blob (unless another step shares them)
    used = {id(t) for st in prog.steps for t in (st.weights, st.bias, st.multipliers, *st.inputs) if t is not None}
    used |= {id(src) for _, src in prog.copies}
    prog.consts[:] = [t for t in prog.consts if id(t) not in dropped or id(t) in used]
    plan_arena(prog)
    place_weights(prog)
    return made
