"""JUnit XML for a gate run: one ``<testcase>`` per case, a failure message a CI page can show.

``classname`` is ``<target>/<pipeline>`` (``builtin/<pipeline>`` for the built-in gate) and
``name`` the case's label; a failure's ``type`` says what failed (``clone``, ``blind_spot``,
``check_error``, ``mismatch``: :class:`~compile_checks.vocab.FailureType`). Each testcase's
``<properties>`` hold the verdict's fields under the names ``gate --json`` and the plugin's
``CaseResult`` use (:data:`PROPERTY_FIELDS`). A failed verdict's message is
:func:`compile_checks.verdict.failure_reasons`
(op, argument, pool and bytes of every surviving clone with the explanation's one-line summary;
a negative control that stopped cloning says so); a compile error is an ``<error>``.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from compile_checks.gate.outcome import Outcome
from compile_checks.verdict import render_copy
from compile_checks.vocab import FailureType, FindingKind


def failure_message(o: Outcome) -> str | None:
    """Why the case failed (one paragraph: :meth:`Outcome.failure_reasons`), or None when it passed."""
    return " | ".join(o.failure_reasons()) or None


def failure_type(o: Outcome) -> FailureType:
    """What failed, first what the case is about: a copy verdict, then a blind spot, another failing finding
    (a lost write, an error, too many recompiles), and last a compiled run that differs from eager."""
    verdict = o.verdict
    failing = [f for f in verdict.failing if f.kind != FindingKind.MISMATCH]
    if o.clean is not None and verdict.clean != verdict.expect_clean and (verdict.expect_clean or not failing):
        return FailureType.CLONE
    if any(f.details.get("what") == "unanalysed" for f in failing):
        return FailureType.BLIND_SPOT
    if failing:
        return FailureType.CHECK_ERROR
    return FailureType.MISMATCH


# the verdict's fields, named as in ``gate --json`` and on the plugin's ``CaseResult``
PROPERTY_FIELDS: tuple[str, ...] = ("pipeline", "expect_clean", "clean", "verdict_met", "passed", "eager_match")


def properties(o: Outcome) -> dict[str, str]:
    """``<property>`` name -> value of a testcase: :data:`PROPERTY_FIELDS` (JSON spelling: true / false / null)."""
    values = o.to_dict()
    return {k: json.dumps(values[k]) if not isinstance(values[k], str) else values[k] for k in PROPERTY_FIELDS}


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
        props = ET.SubElement(tc, "properties")
        for key, value in properties(o).items():
            ET.SubElement(props, "property", name=key, value=value)
        message = failure_message(o)
        if o.error is not None:
            ET.SubElement(tc, "error", message=message or "", type=o.error_kind or "error").text = message
        elif message is not None:
            ET.SubElement(tc, "failure", message=message, type=failure_type(o)).text = message.replace(" | ", "\n")
        details = [
            f"expect {'clean' if o.expect_clean else 'clones'}; mode {'analysis-only' if o.analysis_only else 'full'}"
        ]
        details += [render_copy(c) for c in [*o.clones, *o.other_clones]]
        details += [f"note: {f.message}" for f in o.verdict.notes]
        ET.SubElement(tc, "system-out").text = "\n".join(details)
    write_testsuites(suite, path)


def write_testsuites(suite: ET.Element, path: Path) -> None:
    """``suite`` as the one ``<testsuite>`` of a ``<testsuites>`` JUnit XML file at ``path`` (folders made)."""
    root = ET.Element("testsuites")
    root.append(suite)
    tree = ET.ElementTree(root)
    ET.indent(tree)
    path.parent.mkdir(parents=True, exist_ok=True)
    tree.write(path, encoding="utf-8", xml_declaration=True)


__all__ = ["PROPERTY_FIELDS", "failure_message", "failure_type", "properties", "write_junit", "write_testsuites"]
