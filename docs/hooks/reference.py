"""mkdocs hook: the reference pages are generated from the code, never kept by hand.

A page asks for a generated block with a marker line ``<!-- generated: NAME -->``; at build time
the marker is replaced by ``GENERATORS[NAME]()``: the CLI from the argparse parser, the config keys
from their validators' tables, exit codes from the CLI's table and :class:`ExitCode`, causes, copy
kinds and the other vocabularies from the enums (their comments are their meanings), the ``--json``
keys from the dataclasses that write them, the built-in scenarios from the registry, and the
performance figures from the benchmarks' results files (``reports/results``).

An unknown marker, or a marker left in a page, fails the build (``mkdocs build --strict``).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import json
import os
import re
import sys
import textwrap
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # this checkout's package, whatever the environment has installed
    sys.path.insert(0, str(ROOT))

MARKER = re.compile(r"^<!-- generated: ([a-z_-]+) -->$", re.M)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- the CLI, from compile_checks.cli_parser.parser() ---


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`" + (" ..." if action.nargs in ("*", "+") else "")
    shown = ", ".join(f"`{f}`" for f in action.option_strings)
    if action.nargs != 0:
        metavar = action.metavar or (
            "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
        )
        shown += f" `{metavar}`"
    return shown


def _options(parser: argparse.ArgumentParser) -> list[list[object]]:
    rows: list[list[object]] = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        help_text = action.help or ""
        if action.choices and action.option_strings:
            help_text += f" (one of {', '.join(map(str, action.choices))})"
        if action.required and action.option_strings:
            help_text += " (required)"
        rows.append([_flags(action), help_text])
    return rows


def cli() -> str:
    from compile_checks.cli_parser import parser

    p = parser()
    p.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100)
    out = [f"`{p.prog}`: {p.description}", "", f"{p.epilog}", ""]
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    for name, sp in sub.choices.items():
        sp.formatter_class = p.formatter_class
        out += [f"## `{p.prog} {name}`", "", helps.get(name, "") or "", ""]
        if sp.description:
            out += [sp.description, ""]
        out += ["```text", sp.format_usage().strip(), "```", "", _table(["argument", "meaning"], _options(sp)), ""]
    return "\n".join(out)


# --- configuration keys ---


def _toml_type(annotation: Any) -> str:
    """A pydantic field's annotation as a TOML value's kind: ``list of strings``, ``table of name = bool``."""
    import enum
    import typing

    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:  # StrictStr, StrictBool: the type, strictly
        return _toml_type(typing.get_args(annotation)[0])
    args = [a for a in typing.get_args(annotation) if a is not type(None) and a is not Ellipsis]
    if origin in (tuple, list):
        return f"list of {_toml_type(args[0])}"
    if origin is dict:
        return f"table of name = {_toml_type(args[1])}" if args[1] is not Any else "table"
    if args and origin is not None and len(args) == 1:  # X | None, Annotated[X, ...]
        return _toml_type(args[0])
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " / ".join(f"`{m.value}`" for m in annotation)
    name = getattr(annotation, "__name__", str(annotation))
    return {"str": "strings", "bool": "bool", "Path": "string (a path)"}.get(name, name)


def _model_table(model: Any) -> str:
    """The keys of a config model: its fields' TOML kind, default and description."""
    rows = []
    for key, field in model.model_fields.items():
        kind = _toml_type(field.annotation)
        kind = "string" if kind == "strings" else kind
        default = field.get_default(call_default_factory=True)
        shown = "not set" if default in (None, (), {}) else f"`{json.dumps(default)}`"
        rows.append([f"`{key}`", kind, shown, field.description or ""])
    return _table(["key", "type", "default", "meaning"], rows)


def config() -> str:
    from compile_checks.gate.config import GateConfig
    from compile_checks.scan.config import ScanConfig

    gate, scan = _model_table(GateConfig), _model_table(ScanConfig)
    return f"### `[tool.compile_checks]`\n\n{gate}\n\n### `[tool.compile_checks.scan]`\n\n{scan}\n"


# --- exit codes: the CLI module's table, checked against vocab.ExitCode ---


def exit_codes() -> str:
    import compile_checks.cli
    from compile_checks.vocab import ExitCode

    doc = compile_checks.cli.__doc__ or ""
    block = doc.split("Exit codes", 1)[1]
    meanings: dict[int, list[str]] = {}
    current = None
    for line in block.splitlines():
        m = re.match(r"^    (\d+)\s+(.*)$", line)
        if current is None and not m:
            continue  # the table's heading
        if m:
            current = int(m.group(1))
            meanings[current] = [m.group(2)]
        elif line.startswith("         ") and current is not None:
            meanings[current].append(line.strip())
        else:
            break
    missing = {int(c) for c in ExitCode} ^ set(meanings)
    if missing:
        raise ValueError(f"compile_checks.cli's exit-code table and vocab.ExitCode disagree on {sorted(missing)}")
    rows = [[f"`{int(c)}`", f"`{c.name}`", " ".join(meanings[int(c)]).replace("``", "`")] for c in ExitCode]
    return _table(["code", "`ExitCode`", "meaning"], rows)


# --- the vocabularies: enum members and the comments above / beside them in vocab.py ---


def _member_comments(source: str, class_name: str) -> dict[str, str]:
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    out: dict[str, str] = {}
    for node in cls.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            above, n = [], node.lineno - 1
            while n in comments and lines[n - 1].strip().startswith("#"):
                above.insert(0, comments[n])
                n -= 1
            beside = comments.get(node.lineno) if not lines[node.lineno - 1].strip().startswith("#") else None
            out[node.targets[0].id] = " ".join([*above, *([beside] if beside else [])])
    return out


def _enum(cls: Any, meanings: dict[str, str] | None = None) -> str:
    import compile_checks.vocab as vocab

    comments = _member_comments(Path(vocab.__file__).read_text(), cls.__name__)
    rows = [[f"`{m.value}`", (meanings or {}).get(m.value) or comments.get(m.name, "")] for m in cls]
    return f"`{cls.__name__}`: {(cls.__doc__ or '').strip()}\n\n" + _table(["value", "meaning"], rows)


def _causes(cls: Any, fixes: dict[str, str], aten_fixes: dict[str, str]) -> str:
    """The causes with Inductor's rule (the comment above each member) and the fix the check prints (for a
    pool written by plain ATen writes, where it differs: after "ATen writes:")."""
    import compile_checks.vocab as vocab

    comments = _member_comments(Path(vocab.__file__).read_text(), cls.__name__)
    rows = [
        [
            f"`{m.value}`",
            comments.get(m.name, ""),
            fixes[m] + (f"; **ATen writes:** {aten_fixes[m]}" if m in aten_fixes else ""),
        ]
        for m in cls
    ]
    doc = (cls.__doc__ or "").strip()
    return f"`{cls.__name__}`: {doc}\n\n" + _table(["cause", "Inductor's rule", "fix printed"], rows)


def vocabularies() -> str:
    from compile_checks import vocab
    from compile_checks.explain.explanations import ATEN_FIXES, FIXES

    parts = [
        "## Causes (`Cause`)\n\n" + _causes(vocab.Cause, FIXES, ATEN_FIXES),
        "## How a pool is written (`WriteKind`): the fix follows it\n\n" + _enum(vocab.WriteKind),
        "## Copy kinds (`CopyKind`)\n\n" + _enum(vocab.CopyKind),
        "## Write findings (`WriteProblem`, `CompileProblem`)\n\n"
        + _enum(vocab.WriteProblem)
        + "\n\n"
        + _enum(vocab.CompileProblem),
        "## Blind spots (`BlindSpot`)\n\n" + _enum(vocab.BlindSpot),
        "## JUnit failure types (`FailureType`)\n\n" + _enum(vocab.FailureType),
        "## Pipelines (`Pipeline`) and modes (`Mode`)\n\n" + _enum(vocab.Pipeline) + "\n\n" + _enum(vocab.Mode),
        "## Compile phases (`Phase`, `--timings`)\n\n" + _enum(vocab.Phase),
    ]
    return "\n\n".join(parts)


# --- the --json document: its top level, one case (Outcome), one copy (copy_fields) ---


def _docstring_attributes(doc: str) -> dict[str, str]:
    """``name: text`` entries of a Google-style ``Attributes:`` section (``a / b: text`` documents both)."""
    out: dict[str, str] = {}
    lines = textwrap.dedent("\n".join(doc.splitlines()[1:])).splitlines()
    if "Attributes:" not in lines:
        return out
    names: list[str] = []
    for line in lines[lines.index("Attributes:") + 1 :]:
        m = re.match(r"^    ([\w /]+?):\s+(.*)$", line)
        if m:
            names = [n.strip() for n in m.group(1).split("/")]
            for n in names:  # "shape / dtype: of the buffer": "shape of the buffer"
                out[n] = m.group(2).strip() if len(names) == 1 else f"{n} {m.group(2).strip()}"
        elif line.startswith("      ") and names:
            for n in names:
                out[n] += " " + line.strip()
        elif line.strip():
            break
    return out


def field_meanings(cls: type) -> dict[str, str]:
    """Each field's meaning from the class's own docs: its entry in the docstring's ``Attributes:`` section,
    else the comment beside it, else the comment lines right above it; a property: its docstring."""
    import inspect

    lines = textwrap.dedent(inspect.getsource(cls)).splitlines()
    documented = _docstring_attributes(cls.__doc__ or "")
    out: dict[str, str] = {}
    for i, line in enumerate(lines):
        m = re.match(r"^    (\w+): [^#]*?(?:#\s*(.*))?$", line)
        if not m or m.group(1) in out:
            continue
        above: list[str] = []
        j = i - 1
        while j >= 0 and lines[j].strip().startswith("#"):
            above.insert(0, lines[j].strip().lstrip("#").strip())
            j -= 1
        beside = (m.group(2) or "").strip()
        out[m.group(1)] = documented.get(m.group(1)) or beside or " ".join(above)
    for name, value in vars(cls).items():
        if isinstance(value, property) and value.__doc__:
            out.setdefault(name, " ".join(value.__doc__.split()))
    return {k: re.sub(r":\w+:`", "`", v.replace("``", "`")) for k, v in out.items()}


def _inline_entries(doc: str) -> dict[str, str]:
    """```name``: text;`` entries of a function's docstring (what it adds beyond its dataclass)."""
    text = " ".join(doc.split())
    return {m.group(1): m.group(2).strip().replace("``", "`") for m in re.finditer(r"``(\w+)``: (.*?)(?:;|\.$)", text)}


def json_tables() -> list[tuple[str, list[list[str]]]]:
    """The ``--json`` document's sections, each ``(heading, [[key, type, meaning], ...])``."""
    from compile_checks.check.findings import CloneReport, SurvivingClone
    from compile_checks.findings import Finding, Verdict
    from compile_checks.gate.outcome import Outcome

    outcome = field_meanings(Outcome)
    rows = [[f"`{f.name}`", str(f.type), outcome.get(f.name, "")] for f in dataclasses.fields(Outcome)]
    rows += [["`verdict_met`", "bool", outcome.get("verdict_met", "")]]
    rows += [["`passed`", "bool", outcome.get("passed", "")]]
    rows += [["`findings`", "list", outcome.get("findings", "")], ["`verdict`", "dict", outcome.get("verdict", "")]]
    rows += [
        [
            "`eager_compared`",
            "str | None",
            "what `eager_match` compared eager against: `post-grad graph, not generated code` (analysis-only: "
            "a codegen miscompile is unseen), `generated code` (`--full`); null when nothing was compared",
        ]
    ]
    clone = field_meanings(SurvivingClone)
    copy = {**clone, **_inline_entries(SurvivingClone.fields.__doc__ or "")}
    copy_rows = [[f"`{k}`", "", copy.get(k, "")] for k in _returned_keys(SurvivingClone.fields)]
    finding = field_meanings(Finding)
    finding_rows = [[f"`{f.name}`", str(f.type), finding.get(f.name, "")] for f in dataclasses.fields(Finding)]
    verdict_rows = [[f"`{k}`", "", field_meanings(Verdict).get(k, "")] for k in _returned_keys(Verdict.to_dict)]
    report = field_meanings(CloneReport)
    report_rows = [[f"`{k}`", "", report.get(k, "")] for k in _returned_keys(CloneReport.to_dict)]
    clone_rows = [[f"`{f.name}`", str(f.type), clone.get(f.name, "")] for f in dataclasses.fields(SurvivingClone)]
    from compile_checks.check.trace_artifacts import ARTIFACT, region_payload

    artifact = _inline_entries(region_payload.__doc__ or "")
    artifact_rows = [[f"`{k}`", "", artifact.get(k, "")] for k in _returned_keys(region_payload)]
    return [
        ("One case (`cases[]`)", rows),
        ("One finding (`cases[].findings[]`, `compile_checks.findings.Finding`)", finding_rows),
        ("The verdict (`cases[].verdict`, `compile_checks.findings.Verdict`)", verdict_rows),
        ("One copy (`cases[].clones[]`, `cases[].other_clones[]`)", copy_rows),
        ("The full report (`cases[].report`, `CloneReport.to_dict()`)", report_rows),
        ("One copy in the report (`cases[].report.clones[]`, `SurvivingClone`)", clone_rows),
        (f"The structured-trace artifact (`{ARTIFACT}`, one per compiled region under `TORCH_TRACE`)", artifact_rows),
    ]


def json_schema() -> str:
    from compile_checks.gate import outputs

    top = re.search(r"Version \d+: ``(\{.*?\})``", " ".join((outputs.__doc__ or "").split()))
    out = [f"`schema_version`: **{outputs.SCHEMA_VERSION}**. Top level: `{top.group(1) if top else ''}`."]
    for heading, rows in json_tables():
        header = ["key", "type", "meaning"] if any(r[1] for r in rows) else ["key", "meaning"]
        shown = rows if len(header) == 3 else [[r[0], r[2]] for r in rows]
        out += ["", f"### {heading}", "", _table(header, shown)]
    return "\n".join(out)


def _returned_keys(fn: Callable[..., Any]) -> list[str]:
    """The string keys of the dict literal ``fn`` returns (the JSON it writes)."""
    tree = ast.parse(textwrap.dedent(_source(fn)))
    ret = next(n for n in ast.walk(tree) if isinstance(n, ast.Return) and isinstance(n.value, ast.Dict))
    return [k.value for k in ret.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]


def _source(fn: Callable[..., Any]) -> str:
    import inspect

    return inspect.getsource(fn)


# --- the built-in scenarios, from the registry ---


def scenarios() -> str:
    from compile_checks.scenarios.registry import DEFAULT_GATE, FULL_COMPILE_SMOKE, SCENARIOS, VLLM_MODULE_CASES

    rows = [
        [
            f"`{name}`",
            "**gate**" if name in DEFAULT_GATE else "",
            "clean" if s.expect_clean else "clones",
            s.description,
        ]
        for name, s in sorted(SCENARIOS.items(), key=lambda kv: (kv[0] not in DEFAULT_GATE, not kv[1].expect_clean))
    ]
    modules = [
        [f"`{m.name}`", "**gate** (vllm pipelines)", "clean" if m.expect_clean else "clones", m.description]
        for m in VLLM_MODULE_CASES
    ]
    smoke = ", ".join(f"`{s}`" for s in FULL_COMPILE_SMOKE)
    return (
        _table(["scenario", "gate", "expected", "shape"], rows + modules)
        + f"\n\nCompiled fully (C++ codegen) by the built-in gate as its smoke: {smoke}."
    )


# --- performance: reports/results/bench.json (python -m reports.bench) ---


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _machine(m: dict[str, Any]) -> str:
    return (
        f"{m['cpu']}, {m['cores']} cores ({m['threads']} thread used), {m['system']}, "
        f"Python {m['python']}, torch {m['torch']}" + (f", GPU {m['cuda']}" if m.get("cuda") else "")
    )


def performance() -> str:
    path = ROOT / "reports" / "results" / "bench.json"
    doc = json.loads(path.read_text())
    machine = _machine(doc["machine"])
    rows = [
        [
            r["device"],
            _bytes(r["pool_bytes"]),
            f"{r['split_median_ms']:.3f}",
            f"{r['fused_median_ms']:.3f}",
            f"**{r['fused_over_split']:.2f}x**",
            _bytes(r["ideal_bytes_per_step"]),
            r["rounds"],
        ]
        for r in doc["rows"]
    ]
    header = ["device", "pool (K+V, all layers)", "split ms/step", "fused ms/step", "fused / split", "ideal / step"]
    return "\n".join(
        [
            f"Command: `{doc['command']}`",
            "",
            f"Machine: {machine}",
            "",
            _table([*header, "rounds"], rows),
        ]
    )


def hot_path() -> str:
    """``reports/results/bench_hotpath.json`` (``python -m reports.bench_hotpath ... --out reports/results``)."""
    doc = json.loads((ROOT / "reports" / "results" / "bench_hotpath.json").read_text())
    out = [
        f"Command: `{doc['command']}`",
        "",
        f"Machine: {_machine(doc['machine'])}; `paged_write` CPU kernel: {doc['kernel']}, "
        f"debug checks {doc['debug_checks']}",
    ]
    for name, rows in doc["tables"].items():
        if not rows:
            continue
        keys = [k for k in rows[0] if k not in ("min_us",)]
        out += ["", f"### `{name}`", "", _table(keys, [[r[k] for k in keys] for r in rows])]
    return "\n".join(out)


def bench_full() -> str:
    """``reports/results/bench_full.json`` (``python -m reports.bench_full``): what ``gate --full`` adds per case."""
    doc = json.loads((ROOT / "reports" / "results" / "bench_full.json").read_text())
    header = ["target", "case", "analysis-only s", "--full s", "--full / analysis-only", "added s"]
    rows = [
        [
            f"`{r['target']}`",
            r["case"],
            r["analysis_s"],
            r["full_s"],
            f"**{r['full_over_analysis']:.2f}x**",
            r["added_s"],
        ]
        for r in doc["rows"]
    ]
    return "\n".join(
        [
            f"Command: `{doc['command']}` ({doc['rounds']} round(s) per mode)",
            "",
            f"Machine: {_machine(doc['machine'])}",
            "",
            _table(header, rows),
        ]
    )


def production_cost() -> str:
    """``reports/results/bench_production.json`` (``python -m reports.bench_production``): the production-size
    gate per case against its floor (plain ``torch.compile`` to post-grad under ``FakeTensorMode``)."""
    doc = json.loads((ROOT / "reports" / "results" / "bench_production.json").read_text())
    header = ["case", "run", "wall s", "CPU s", "peak RSS", "wall / floor", "CPU / floor", "verdict"]
    rows: list[list[object]] = []
    for row in doc["rows"]:
        for side, got in row.items():
            if side == "case":
                continue
            floor = side == "floor"
            rows.append(
                [
                    f"`{row['case']}`",
                    "floor: `torch.compile` to post-grad" if floor else f"`gate` ({side.removeprefix('gate_')})",
                    got["wall_s"],
                    got["cpu_s"],
                    _bytes(got["peak_rss_bytes"]),
                    "" if floor else f"**{got['wall_over_floor']:.2f}x**",
                    "" if floor else f"{got['cpu_over_floor']:.2f}x",
                    "" if floor else ("as expected" if got["verdict_expected"] else "**wrong**"),
                ]
            )
    load = ", ".join(f"{x:.1f}" for x in doc["load_average"])
    return "\n".join(
        [
            f"Command: `{doc['command']}` ({doc['rounds']} round(s) per run, each run a fresh process)",
            "",
            f"Machine: {_machine(doc['machine'])}; load average {load} when it ended",
            "",
            _table(header, rows),
        ]
    )


def traffic() -> str:
    """The committed traffic report's table (``reports/results/traffic.md``), without its own title."""
    text = (ROOT / "reports" / "results" / "traffic.md").read_text()
    return text.split("\n", 1)[1].strip()


def eviction_table() -> str:
    """``python -m ar_paging.eviction_table 4 8 2 1 0 7``: the real vLLM ``BlockPool`` + manager, chunk by chunk."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # vLLM resolves its platform at first import
    from ar_paging.eviction_table import eviction_table as table

    return table(4, 8, 2, 1, False, 7).to_markdown(index=False)


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli,
    "config": config,
    "exit-codes": exit_codes,
    "vocabularies": vocabularies,
    "json": json_schema,
    "scenarios": scenarios,
    "performance": performance,
    "traffic": traffic,
    "hot-path": hot_path,
    "bench-full": bench_full,
    "production-cost": production_cost,
    "eviction-table": eviction_table,
}

# the committed results' pictures, served as results/NAME (the pages link ../results/NAME)
RESULT_IMAGES = ("traffic.png", "traffic_html.png", "bench.png")


def render(markdown: str) -> str:
    """``markdown`` with every marker replaced by its generated block (KeyError: an unknown marker)."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in GENERATORS:
            raise KeyError(f"unknown generated block {name!r}; known: {', '.join(GENERATORS)}")
        return GENERATORS[name]()

    return MARKER.sub(one, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return render(markdown)


def on_files(files: Any, config: Any, **_: Any) -> Any:
    from mkdocs.structure.files import File

    for name in RESULT_IMAGES:
        path = ROOT / "reports" / "results" / name
        files.append(File.generated(config, f"results/{name}", abs_src_path=str(path)))
    return files
