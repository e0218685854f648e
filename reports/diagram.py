"""``python -m reports.diagram``: the picture of a surviving clone, drawn from a real run of the check.

The example engine's fused layout (``examples/engine``, case ``fused``: every layer's K and V pools are
views of one allocation) is driven through its host loop under the check (analysis-only), and what the
check found is drawn, nothing by hand:

* top: the one storage, byte by byte, with each named pool where its view lies (the pools' own storage
  offsets and sizes); per layer, the span Inductor clones every step (the clone's geometry in the final
  post-grad graph) and the span the ``copy_`` epilogue writes back (V's view); K is written in place;
* bottom: bytes per step (one call of the compiled region) per layer: the chunk's rows the commit
  writes into K in place, against the clone and the copy back that V costs (the report's ``nbytes`` and
  ``written_bytes``).

Writes ``docs/img/surviving_clone.png`` and, beside it, ``surviving_clone.json`` (the figures drawn:
``tests/test_diagram.py`` holds them against a fresh run). Not a test: re-run it when the check's
findings on the example change.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "engine"
OUT = ROOT / "docs" / "img" / "surviving_clone.png"
COMMAND = "python -m reports.diagram"


def _example() -> Any:
    """examples/engine/cases.py under a name of its own (its sibling toy_dit.py importable)."""
    name = "_diagram_engine_cases"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE / "cases.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(EXAMPLE))
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(EXAMPLE))
        sys.modules[name] = module
    return sys.modules[name]


def _span(t: torch.Tensor) -> list[int]:
    """``[start, end)`` bytes of a contiguous view in its storage."""
    start = t.storage_offset() * t.element_size()
    return [start, start + t.numel() * t.element_size()]


def measure(layout: str = "fused") -> dict[str, Any]:
    """Run the example's case in ``layout`` under the check; the figures the diagram draws (plain data)."""
    from compile_checks.api import CloneCheck

    example = _example()
    case = example.build_case(layout, expect_clean=layout == "split")
    cfg = example.CONFIG
    check = CloneCheck(pools=case.pools, analysis_only=True)
    with check:
        case.driver(check.compile(case.fn))
    report = check.report
    assert report is not None
    storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in case.pools.values()}
    storage_bytes = sum(storages.values())
    sites = {(r.index, s.clone_node): s for r in check.probe.regions for i in r.inner for s in i.clone_sites}
    reinplaced = sorted({m.pool for m in report.mutated_args if m.reinplaced and m.pool})
    layers = []
    for c in sorted(report.clones, key=lambda c: c.pool or ""):
        site = sites[(c.region, c.node)]
        v = case.pools[c.pool]
        k = case.pools[c.pool.replace(".v", ".k")]
        itemsize = v.element_size()
        # where the clone starts in the storage: its source's offset in the final graph (the input itself
        # when the input was cloned); the region ran on the tensors it was compiled for, so no rebasing
        start = (v.storage_offset() if site.clone_is_input else site.clone_source_offset) * itemsize
        clone = [start, start + c.nbytes]
        written = _span(v)
        if not (clone[0] <= written[0] and written[1] <= clone[1]) or c.written_bytes != written[1] - written[0]:
            raise RuntimeError(f"{c.pool}: the clone {clone} does not hold the written-back view {written}")
        row_bytes = k[0].numel() * k.element_size()
        layers.append(
            {
                "layer": c.layer,
                "k_pool": c.pool.replace(".v", ".k"),
                "v_pool": c.pool,
                "k_reinplaced": c.pool.replace(".v", ".k") in reinplaced,
                "k_span": _span(k),
                "v_span": written,
                "clone_span": clone,
                "clone_bytes": c.nbytes,
                "written_back_bytes": c.written_bytes,
                "chunk_bytes": cfg.chunk_tokens * row_bytes,
                "cause": c.explanation.cause if c.explanation is not None else None,
            }
        )
    return {
        "command": COMMAND,
        "case": f"examples/engine: {layout}",
        "storage_bytes": storage_bytes,
        "region_calls": sum(report.region_calls.values()),
        "bytes_per_call": report.clone_bytes,
        "layers": layers,
    }


def draw(figures: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = figures["layers"]
    if not layers:
        raise RuntimeError(f"{figures['case']}: no surviving clone to draw")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 3.2 + 1.1 * len(layers)), height_ratios=[2 + len(layers), 2])
    total = figures["storage_bytes"]
    # the storage and the pools in it
    y = len(layers) + 1
    top.barh(y, total, left=0, height=0.8, color="#eeeeee", edgecolor="black")
    for lay in layers:
        for key, colour in (("k_span", "#4c9be8"), ("v_span", "#f28e2b")):
            a, b = lay[key]
            top.barh(y, b - a, left=a, height=0.8, color=colour, edgecolor="black")
            top.text((a + b) / 2, y, lay["k_pool" if key == "k_span" else "v_pool"], ha="center", va="center")
    # per layer: what one step does
    for i, lay in enumerate(layers):
        row = len(layers) - i
        a, b = lay["clone_span"]
        top.barh(row, b - a, left=a, height=0.5, color="none", edgecolor="#d62728", hatch="///")
        top.text(a, row + 0.33, f"clone for {lay['v_pool']}: {b - a} B copied every step", va="bottom", fontsize=8)
        va, vb = lay["v_span"]
        top.annotate(
            "", xy=((va + vb) / 2, y - 0.42), xytext=((va + vb) / 2, row + 0.27), arrowprops={"arrowstyle": "->"}
        )
        top.text((va + vb) / 2, (row + y) / 2, f"  copied back: {vb - va} B", va="center", fontsize=8)
        ka, kb = lay["k_span"]
        inplace = "written in place" if lay["k_reinplaced"] else "not written in place"
        top.text((ka + kb) / 2, y + 0.5, f"{lay['k_pool']}: {inplace}", ha="center", va="bottom", fontsize=8)
    top.set_xlim(0, total)
    top.set_ylim(0.3, y + 1.1)
    top.set_yticks([y, *range(len(layers), 0, -1)], ["one storage", *(f"layer {lay['layer']}" for lay in layers)])
    top.set_xlabel("byte offset in the allocation")
    top.set_title(f"{figures['case']}: K and V pools as views of one allocation (cause: {layers[0]['cause']})")
    # bytes per step
    names = [f"layer {lay['layer']}" for lay in layers]
    chunk = [lay["chunk_bytes"] for lay in layers]
    clone = [lay["clone_bytes"] for lay in layers]
    back = [lay["written_back_bytes"] for lay in layers]
    pos = range(len(layers))
    bottom.barh([p + 0.2 for p in pos], chunk, height=0.35, color="#4c9be8", label="K: the chunk's rows, in place")
    bottom.barh([p - 0.2 for p in pos], clone, height=0.35, color="#d62728", label="V: clone")
    bottom.barh([p - 0.2 for p in pos], back, left=clone, height=0.35, color="#f28e2b", label="V: copy back")
    for p, c, w in zip(pos, clone, back):
        bottom.text(c + w, p - 0.2, f"  {c + w} B", va="center", fontsize=8)
    for p, c in zip(pos, chunk):
        bottom.text(c, p + 0.2, f"  {c} B", va="center", fontsize=8)
    bottom.set_yticks(list(pos), names)
    bottom.set_xlabel("bytes per step (one call of the compiled region)")
    bottom.legend(loc="lower right", fontsize=8)
    bottom.set_xlim(0, max(c + w for c, w in zip(clone, back)) * 1.25)
    fig.text(0.01, 0.005, f"drawn by `{figures['command']}` from the check's report", fontsize=7, color="grey")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=OUT, help=f"the PNG (default: {OUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    from reports.cli_args import out_file

    out_file(parser, args.out, name=OUT.name)
    figures = measure()
    draw(figures, args.out)
    args.out.with_suffix(".json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {args.out} and {args.out.with_suffix('.json').name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
