"""The text of ``compile-checks repro``'s standalone file: torch only, the gate's verdict written into it.

What the file holds (:func:`write_repro`):

* the region's inputs (:func:`input_lines`): inputs that share a storage are carved from one byte
  buffer, each at its own dtype, storage offset, shape and strides (``Tensor.set_`` on the buffer's
  untyped storage: pools carved from one arena in several dtypes are reproduced as they are); small
  integer tensors (slots, block tables) keep their values, floating ones are seeded random;
* the function: dynamo's captured graph of that region, every custom op replaced by a stand-in with
  the op's own schema (``repro::<name>``) whose body writes every *declared* mutated argument whole;
* the settings the case compiled with (:class:`ReproSpec`): the Inductor config (functionalization,
  the pipeline's and the case's keys), ``dynamic`` and ``mode``; and what it cannot reproduce;
* the gate's verdict for that region: the copies it found (bytes per call) and its failing findings.

The file's expectation is that verdict, never one of its own: exit 1 (an AssertionError) when the
generated code allocates a buffer of a size the gate found copied, or compiled != eager; exit 2 when
the gate found something this file does not show (it says what it cannot reproduce); exit 0 ("ok")
when the gate found nothing in the region and compiled == eager.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

SMALL_INT_TENSOR = 4096  # integer tensors up to this many elements are written out with their values


@dataclass(frozen=True)
class ReproSpec:
    """What the file compiles with and what it expects, from the case's settings and the gate's verdict.

    ``copies``: (description, bytes per call) of each copy the gate found in the region;
    ``findings``: the gate's failing findings there (one line each), which no stand-in op reproduces;
    ``cannot``: what of the case's compile the file cannot reproduce (a pipeline's own passes, a config
    value that is no literal), one line each.
    """

    title: str
    inductor_config: dict[str, Any] = field(default_factory=dict)
    mode: str | None = None
    copies: tuple[tuple[str, int], ...] = ()
    findings: tuple[str, ...] = ()
    cannot: tuple[str, ...] = ()


def custom_ops(gm: torch.fx.GraphModule) -> dict[str, Any]:
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
        f"# stand-in for {qualname}: its schema; writes its declared mutated arguments {mutated} whole",
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


def input_lines(inputs: list[Any], names: list[str]) -> list[str]:
    """``make_inputs()``: one byte buffer per storage, each tensor input carved from it at its own dtype."""
    bases: dict[int, str] = {}
    lines = ["def make_inputs():", "    gen = torch.Generator().manual_seed(0)"]
    for value in inputs:
        if isinstance(value, dict) and value["storage"] not in bases:
            bases[value["storage"]] = base = f"base{len(bases)}"
            lines.append(f"    {base} = torch.zeros({value['storage_nbytes']}, dtype=torch.uint8).untyped_storage()")
    lines.append("    args = []")
    for i, value in enumerate(inputs):
        if not isinstance(value, dict):
            lines.append(f"    args.append({value!r})  # {names[i]}")
            continue
        dtype, shape = value["dtype"], value["shape"]
        lines.append(
            f"    args.append(torch.empty(0, dtype={dtype}).set_({bases[value['storage']]}, {value['offset']}, "
            f"{shape}, {value['stride']}))  # {names[i]}"
        )
        if value["values"] is not None:
            lines.append(f"    args[-1].copy_(torch.tensor({value['values'].tolist()}, dtype={dtype}))")
        elif dtype.is_floating_point:
            lines.append(f"    args[-1].copy_(torch.randn({shape}, generator=gen).to({dtype}))")
    shared = {k for k in bases if sum(isinstance(v, dict) and v["storage"] == k for v in inputs) > 1}
    if shared:
        groups = [[names[i] for i, v in enumerate(inputs) if isinstance(v, dict) and v["storage"] == k] for k in shared]
        lines.insert(0, f"# inputs sharing one storage (carved from one buffer): {groups}")
    lines.append("    return args")
    return lines


def _docstring(spec: ReproSpec) -> list[str]:
    lines = [
        f'"""{spec.title}',
        "",
        "Standalone (torch only): the region's inputs with their aliasing, dynamo's graph of it, torch.compile with",
        "the case's settings; the gate's verdict for the region is what the file checks (GATE_COPIES, GATE_FINDINGS).",
        "Exit 1: reproduced (a buffer of a copy's size, or compiled != eager); 2: not reproduced; 0: ok.",
    ]
    if spec.cannot or spec.findings:
        lines += ["", "What this file cannot reproduce:"]
        lines += [f"- {c}" for c in (*spec.findings, *spec.cannot)]
    return [*lines, '"""']


def write_repro(gm: torch.fx.GraphModule, inputs: list[Any], dynamic: bool, spec: ReproSpec, out: Path) -> Path:
    """Write the standalone file for graph ``gm`` (with its first call's ``inputs``) to ``out``."""
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    ops = custom_ops(gm)
    code = gm.code
    for qualname in ops:
        ns, name = qualname.split(".")
        code = re.sub(rf"torch\.ops\.{ns}\.{name}\b", f"torch.ops.repro.{name}", code)
    body = code.strip().replace("def forward(self, ", "def fn(").replace("def forward(self)", "def fn()")
    lines = [
        *_docstring(spec),
        "",
        "import sys",
        "",
        "import torch",
        "from torch import device  # noqa: F401  (the graph may name devices)",
        "",
        "# the case's compile: functionalization, the pipeline's and the case's Inductor config, caches off",
        f"INDUCTOR_CONFIG = {spec.inductor_config!r}",
        f"COMPILE = {{'dynamic': {dynamic!r}, 'mode': {spec.mode!r}}}",
        "# the gate's verdict for this region: (copy, bytes per call), and its failing findings",
        f"GATE_COPIES = {list(spec.copies)!r}",
        f"GATE_FINDINGS = {list(spec.findings)!r}",
        f"CANNOT_REPRODUCE = {list(spec.cannot)!r}",
        "",
        'LIB = torch.library.Library("repro", "FRAGMENT")',
        "",
    ]
    for qualname, overload in ops.items():
        lines += _op_lines(qualname, overload, _out_like(gm, overload))
    lines += ["", *body.splitlines(), "", "", *input_lines(inputs, names), "", ""]
    lines += _MAIN.splitlines()
    out.write_text("\n".join(lines) + "\n")
    return out


_MAIN = """def main():
    for line in GATE_FINDINGS + CANNOT_REPRODUCE:
        print(f"note: this file cannot reproduce {line}", file=sys.stderr)
    eager_args, compiled_args = make_inputs(), make_inputs()
    eager_out = fn(*eager_args)
    allocated = []
    guards = torch._C._dynamo.guards
    for name in ("_empty_strided_cpu", "_empty_strided_cuda"):
        original = getattr(guards, name)

        def record(size, stride, dtype, *rest, _original=original):
            buf = _original(size, stride, dtype, *rest)
            allocated.append(buf.untyped_storage().nbytes())
            return buf

        setattr(guards, name, record)
    with torch._inductor.config.patch(INDUCTOR_CONFIG):
        compiled_out = torch.compile(fn, **COMPILE)(*compiled_args)
    failures = []
    copied = sorted({n for n in allocated if n in {nbytes for _, nbytes in GATE_COPIES}})
    if copied:
        what = "; ".join(f"{copy}: {nbytes} B/call" for copy, nbytes in GATE_COPIES if nbytes in copied)
        failures.append(f"the generated code allocates {copied} bytes every call: the copy the gate found ({what})")
    for i, (a, b) in enumerate(zip(eager_args, compiled_args)):
        if isinstance(a, torch.Tensor) and not torch.allclose(a, b, rtol=1e-4, atol=1e-4):
            diff = (a.float() - b.float()).abs().max().item()
            failures.append(f"input {i}: compiled wrote it differently from eager (max diff {diff:.3g})")
    eager_flat = eager_out if isinstance(eager_out, (list, tuple)) else [eager_out]
    compiled_flat = compiled_out if isinstance(compiled_out, (list, tuple)) else [compiled_out]
    for a, b in zip(eager_flat, compiled_flat):
        if isinstance(a, torch.Tensor) and not torch.allclose(a, b, rtol=1e-4, atol=1e-4):
            failures.append("compiled output != eager")
    assert not failures, "\\n".join(failures)
    missing = [f"{copy} ({nbytes} B/call)" for copy, nbytes in GATE_COPIES if nbytes not in copied]
    if missing or GATE_FINDINGS:
        print(f"NOT REPRODUCED: the gate found {'; '.join(missing + GATE_FINDINGS)}; this file shows none of it "
              "(compiled == eager)", file=sys.stderr)
        sys.exit(2)
    print("ok: the gate found no copy and no failing finding in this region, and compiled == eager")


if __name__ == "__main__":
    main()"""


__all__ = ["SMALL_INT_TENSOR", "ReproSpec", "custom_ops", "input_lines", "write_repro"]
