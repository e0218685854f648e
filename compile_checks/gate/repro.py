"""``compile-checks repro TARGET [--case NAME] [--out FILE]``: one standalone file to paste into an upstream issue.

The file imports only torch. It holds, for the case's first region with a pool copy (else its first
region that writes an input):

* the region's inputs as shapes, strides, storage offsets and aliasing (inputs that share a storage
  are views of one base, as the engine's pools were), small integer tensors (slots, block tables)
  with their values, the rest seeded random;
* the function: dynamo's captured graph of that region, every custom op in it replaced by a
  stand-in with the op's own schema (``repro::<name>``, the same mutated arguments) whose body
  writes every mutated argument whole and returns a tensor like one of its inputs;
* ``torch.compile(fn, dynamic=...)`` as the region was compiled, and two asserts: no buffer of the
  generated code as large as an input the function writes (the copy: every ``empty_strided`` of the
  generated code is recorded), and compiled == eager on every input and output (the wrong write).

It exits non-zero when Inductor copies or writes wrong, zero when it does neither. The region is
found by running the case through the check (analysis-only), then recorded by running it again
with a backend that keeps each dynamo graph and its first real inputs (no Inductor).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

SMALL_INT_TENSOR = 4096  # integer tensors up to this many elements are written out with their values


@dataclass
class RecordedGraph:
    """One dynamo graph and the real inputs of its first call."""

    gm: torch.fx.GraphModule
    dynamic: bool
    inputs: list[Any] | None = None


@dataclass
class Recorder:
    graphs: list[RecordedGraph] = field(default_factory=list)

    def backend(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **_: Any) -> Callable[..., Any]:
        dynamic = any(
            isinstance(x, torch.SymInt | torch.SymFloat)
            or (isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape))
            for x in example_inputs
        )
        graph = RecordedGraph(gm, dynamic)
        self.graphs.append(graph)

        def run(*args: Any) -> Any:
            if graph.inputs is None:
                graph.inputs = [_snapshot(a) for a in args]
            return gm.forward(*args)

        return run


def _snapshot(value: Any) -> Any:
    """An input as it was before the call: tensors cloned with their geometry and storage identity."""
    if not isinstance(value, torch.Tensor):
        return value
    storage = value.untyped_storage()
    return {
        "shape": tuple(value.shape),
        "stride": tuple(value.stride()),
        "offset": value.storage_offset(),
        "dtype": value.dtype,
        "storage": storage.data_ptr(),
        "storage_nbytes": storage.nbytes(),
        # integer tensors (slots, block tables) and scalars (a tensorified float, an eps) keep their values
        "values": value.detach().clone()
        if value.numel() <= (1 if value.is_floating_point() else SMALL_INT_TENSOR)
        else None,
    }


# ---- writing the file ------------------------------------------------------------------------------


def _custom_ops(gm: torch.fx.GraphModule) -> dict[str, Any]:
    """``ns.name`` -> OpOverload of every non-aten op the graph calls."""
    ops: dict[str, Any] = {}
    for node in gm.graph.nodes:
        target = node.target
        if node.op != "call_function":
            continue
        overload = target if isinstance(target, torch._ops.OpOverload) else None
        if overload is None and isinstance(target, torch._ops.OpOverloadPacket):
            overload = target.default
        if overload is not None and overload.namespace not in ("aten", "prims", "_c10d_functional", "higher_order"):
            ops[f"{overload.namespace}.{overload._schema.name.split('::')[1]}"] = overload
    return ops


def _op_lines(qualname: str, overload: Any, out_like: int | None) -> list[str]:
    schema = overload._schema
    name = schema.name.split("::")[1]
    mutated = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    decl = str(schema).split("::", 1)[1]
    returns = bool(schema.returns) and out_like is not None
    result = f"torch.zeros_like(args[{out_like}]) + sum(args[i].float().mean() for i in MUTATED_{name})"
    return [
        f"# stand-in for {qualname}: its schema; writes its mutated arguments {mutated} whole",
        f'LIB.define("{decl}")',
        f"MUTATED_{name} = [i for i in {mutated}]",
        "",
        "",
        f"def _{name}(*args):",
        f"    for n, i in enumerate(MUTATED_{name}):",
        "        args[i].copy_(torch.arange(args[i].numel(), dtype=args[i].dtype).view(args[i].shape) + n + 1)",
        f"    return {result if returns else 'None'}",
        "",
        "",
        f'LIB.impl("{name}", _{name}, "CompositeExplicitAutograd")',
        f'torch.library.register_fake("repro::{name}")(lambda *args: '
        f"{f'torch.empty_like(args[{out_like}])' if returns else 'None'})",
        "",
    ]


def _out_like(gm: torch.fx.GraphModule, overload: Any) -> int | None:
    """The argument whose shape and dtype the op's output has (what the stand-in returns a tensor like)."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in (overload, getattr(overload, "overloadpacket", None)):
            out = node.meta.get("example_value")
            for i, arg in enumerate(node.args):
                val = arg.meta.get("example_value") if isinstance(arg, torch.fx.Node) else None
                if not (isinstance(out, torch.Tensor) and isinstance(val, torch.Tensor)):
                    continue
                if out.dtype == val.dtype and tuple(out.shape) == tuple(val.shape):
                    return i
    return None


def _input_lines(inputs: list[Any], names: list[str]) -> list[str]:
    bases: dict[int, tuple[str, torch.dtype, int]] = {}
    lines = ["def make_inputs():", "    gen = torch.Generator().manual_seed(0)"]
    for value in inputs:
        if not isinstance(value, dict):
            continue
        key = value["storage"]
        if key not in bases:
            base = f"base{len(bases)}"
            itemsize = torch.empty(0, dtype=value["dtype"]).element_size()
            numel = value["storage_nbytes"] // itemsize
            bases[key] = (base, value["dtype"], numel)
            fill = (
                f"torch.randn({numel}, generator=gen, dtype={value['dtype']})"
                if value["dtype"].is_floating_point
                else f"torch.zeros({numel}, dtype={value['dtype']})"
            )
            lines.append(f"    {base} = {fill}")
    lines.append("    args = []")
    for i, value in enumerate(inputs):
        if not isinstance(value, dict):
            lines.append(f"    args.append({value!r})  # {names[i]}")
            continue
        base = bases[value["storage"]][0]
        lines.append(
            f"    args.append({base}.as_strided({value['shape']}, {value['stride']}, {value['offset']}))  # {names[i]}"
        )
        if value["values"] is not None:
            lines.append(f"    args[-1].copy_(torch.tensor({value['values'].tolist()}, dtype={value['dtype']}))")
    shared = {k for k in bases if sum(isinstance(v, dict) and v["storage"] == k for v in inputs) > 1}
    if shared:
        groups = [[names[i] for i, v in enumerate(inputs) if isinstance(v, dict) and v["storage"] == k] for k in shared]
        lines.insert(0, f"# inputs sharing one storage (views of one base): {groups}")
    lines.append("    return args")
    return lines


def write_repro(graph: RecordedGraph, out: Path, title: str) -> Path:
    """Write the standalone file for ``graph`` to ``out``."""
    gm, inputs = graph.gm, graph.inputs or []
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    ops = _custom_ops(gm)
    code = gm.code
    for qualname in ops:
        ns, name = qualname.split(".")
        code = re.sub(rf"torch\.ops\.{ns}\.{name}\b", f"torch.ops.repro.{name}", code)
    body = code.strip().replace("def forward(self, ", "def fn(").replace("def forward(self)", "def fn()")
    lines = [
        f'"""{title}',
        "",
        "Standalone (torch only): the region's inputs with their aliasing, dynamo's graph of it, torch.compile,",
        "then: no generated buffer as large as an input the function writes (a copy), and compiled == eager.",
        '"""',
        "",
        "import torch",
        "from torch import device  # noqa: F401  (the graph may name devices)",
        "from torch._inductor.utils import run_and_get_code",
        "",
        'LIB = torch.library.Library("repro", "FRAGMENT")',
        "",
    ]
    for qualname, overload in ops.items():
        lines += _op_lines(qualname, overload, _out_like(gm, overload))
    lines += ["", *body.splitlines(), "", "", *_input_lines(inputs, names), "", ""]
    lines += _MAIN.format(dynamic=graph.dynamic).splitlines()
    out.write_text("\n".join(lines) + "\n")
    return out


_MAIN = """def main():
    eager_args, compiled_args = make_inputs(), make_inputs()
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in eager_args]
    eager_out = fn(*eager_args)
    written = [
        i for i, (a, b) in enumerate(zip(eager_args, before)) if isinstance(a, torch.Tensor) and not torch.equal(a, b)
    ]
    largest_write = min((eager_args[i].numel() * eager_args[i].element_size() for i in written), default=None)
    allocated = []
    guards = torch._C._dynamo.guards
    for name in ("_empty_strided_cpu", "_empty_strided_cuda"):
        original = getattr(guards, name)

        def record(size, stride, dtype, *rest, _original=original):
            buf = _original(size, stride, dtype, *rest)
            allocated.append(buf.untyped_storage().nbytes())
            return buf

        setattr(guards, name, record)
    compiled_out, code = run_and_get_code(torch.compile(fn, dynamic={dynamic}), *compiled_args)
    failures = []
    big = [n for n in allocated if largest_write is not None and n >= largest_write]
    if big:
        failures.append(
            f"the generated code allocates {{big}} bytes, as much as an input the function writes "
            f"({{largest_write}} bytes): a copy of it, every call"
        )
    for i, (a, b) in enumerate(zip(eager_args, compiled_args)):
        if isinstance(a, torch.Tensor) and not torch.allclose(a, b, rtol=1e-4, atol=1e-4):
            diff = (a.float() - b.float()).abs().max().item()
            failures.append(f"input {{i}}: compiled wrote it differently from eager (max diff {{diff:.3g}})")
    eager_flat = eager_out if isinstance(eager_out, (list, tuple)) else [eager_out]
    compiled_flat = compiled_out if isinstance(compiled_out, (list, tuple)) else [compiled_out]
    for a, b in zip(eager_flat, compiled_flat):
        if isinstance(a, torch.Tensor) and not torch.allclose(a, b, rtol=1e-4, atol=1e-4):
            failures.append("compiled output != eager")
    assert not failures, "\\n".join(failures)
    print("ok: no copy of a written input, compiled == eager")


if __name__ == "__main__":
    main()"""


def record_case(case: Any) -> Recorder:
    """Run ``case`` once with a recording backend (each dynamo graph and its first real inputs, no Inductor)."""
    recorder = Recorder()
    torch._dynamo.reset()
    if case.reset is not None:
        case.reset()
    if case.compile is not None:
        compiled = case.compile(recorder.backend)
        target = case.fn if compiled is None else compiled
    else:
        target = torch.compile(case.fn, backend=recorder.backend, dynamic=case.dynamic, fullgraph=case.fullgraph)
    with torch.no_grad():
        if case.driver is not None:
            case.driver(target)
        else:
            target(*case.args, **dict(case.kwargs))
    torch._dynamo.reset()
    return recorder


def repro_for(case: Any, region: int | None, out: Path) -> Path:
    """The standalone file for ``case``'s ``region`` (None: the first graph that writes an input)."""
    recorder = record_case(case)
    graphs = [g for g in recorder.graphs if g.inputs is not None]
    if not graphs:
        raise ValueError(f"case {case.name!r}: no compiled graph ran, nothing to reproduce")
    if region is not None and region < len(recorder.graphs) and recorder.graphs[region].inputs is not None:
        graph = recorder.graphs[region]
    else:
        graph = next((g for g in graphs if _custom_ops(g.gm)), graphs[0])
    return write_repro(graph, out, f"Repro of case {case.name!r}: a pool copy or wrong write by Inductor.")


def _pick_case(spec: str, name: str | None) -> Any:
    from compile_checks.gate.targets import declared_cases
    from compile_checks.lazy_case import LazyCase

    declared = declared_cases(spec)
    names = [c.name for c in declared]
    if name is None and len(declared) != 1:
        raise ValueError(f"target {spec!r} has {len(declared)} cases ({', '.join(names)}): name one with --case NAME")
    chosen = next((c for c in declared if name is None or c.name == name), None)
    if chosen is None:
        raise ValueError(f"target {spec!r} has no case {name!r}; its cases: {', '.join(names)}")
    if not hasattr(chosen, "fn"):
        raise ValueError(f"case {chosen.name!r} is a ranked case: repro writes one region of a one-process case")
    return chosen.materialize() if isinstance(chosen, LazyCase) else chosen


def run_repro(spec: str, case_name: str | None, out: Path | None) -> Path:
    """``compile-checks repro``: find the case's copy with the check (analysis-only), then write its region."""
    from compile_checks.case import run_case

    case = _pick_case(spec, case_name)
    result = run_case(case.replace(check_writes=False), analysis_only=True)
    regions = sorted({c.region for c in result.report.clones})
    target = out or Path(f"repro_{re.sub(r'[^A-Za-z0-9_]+', '_', case.name)}.py")
    return repro_for(case, regions[0] if regions else None, target)


__all__ = ["Recorder", "record_case", "repro_for", "run_repro", "write_repro"]
