"""JUnit XML for a gate run: one ``<testcase>`` per case, a failure message a CI page can show.

``classname`` is ``<target>/<pipeline>`` (``builtin/<pipeline>`` for the built-in gate) and
``name`` the case's label. A failed verdict's message names op, argument, pool and bytes of
every surviving clone (plus the explanation's one-line summary when ``compile_checks.explain.explanations``
filled one); a negative control that stopped cloning says so; a compile error is an ``<error>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from compile_checks.gate.runner import Outcome
from compile_checks.vocab import CopyKind


def clone_line(c: dict) -> str:
    """``ar_paging::paged_write v_pool pool layer0.v 32768 bytes at file:line``."""
    line = f"{c['op']} {c['arg']} pool {c['pool']} {c['nbytes']} bytes at {c['where']}"
    if c.get("kind") and c["kind"] != CopyKind.FUNCTIONALIZATION_CLONE:
        line += f" ({c['kind']})"
    if c.get("explanation"):
        line += f" -- {c['explanation']}"
    return line


def failure_message(o: Outcome) -> str | None:
    """Why the case failed (one paragraph), or None when it passed."""
    if o.error is not None:
        return o.error
    parts: list[str] = []
    if o.check_errors:
        parts.append("the check could not decide: " + "; ".join(o.check_errors))
    if o.clean is not None and o.clean != o.expect_clean:
        if o.expect_clean:
            parts.append(f"{len(o.clones)} pool clone(s) survive reinplacing: " + "; ".join(clone_line(c) for c in o.clones))
        else:
            parts.append(
                "negative control stopped cloning: expected a surviving pool clone, found none "
                "(the check lost its power to see this bug)"
            )
    if o.eager_match is False:
        parts.append(f"compiled != eager (max relative diff {o.max_abs_diff:.3g})")
    return " | ".join(parts) or None


def write_junit(outcomes: Sequence[Outcome], path: Path, seconds: float) -> None:
    suite = ET.Element(
        "testsuite",
        name="compile-checks",
        tests=str(len(outcomes)),
        failures=str(sum(o.error is None and not o.passed for o in outcomes)),
        errors=str(sum(o.error is not None for o in outcomes)),
        time=f"{seconds:.3f}",
    )
    for o in outcomes:
        tc = ET.SubElement(suite, "testcase", classname=o.group, name=o.label, time=f"{o.wall_seconds:.3f}")
        message = failure_message(o)
        if o.error is not None:
            ET.SubElement(tc, "error", message=message or "", type=o.error_kind or "error").text = message
        elif message is not None:
            kind = "clone" if not o.verdict_met else "eager_mismatch"
            ET.SubElement(tc, "failure", message=message, type=kind).text = message.replace(" | ", "\n")
        details = [f"expect {'clean' if o.expect_clean else 'clones'}; mode {'analysis-only' if o.analysis_only else 'full'}"]
        details += [clone_line(c) for c in o.clones] + o.notes
        ET.SubElement(tc, "system-out").text = "\n".join(details)
    tree = ET.ElementTree(ET.Element("testsuites"))
    tree.getroot().append(suite)
    ET.indent(tree)
    path.parent.mkdir(parents=True, exist_ok=True)
    tree.write(path, encoding="utf-8", xml_declaration=True)


__all__ = ["clone_line", "failure_message", "write_junit"]
