"""``compile-checks merge OUT.json...``: the shards of one gate run (``gate --shard K/N --json``) as one run.

The merged result is printed and written by the gate's own writers (table or ``--json``, ``--junitxml``)
and exits with the gate's code (:func:`~compile_checks.gate.commands.exit_code` over every case), so a
CI matrix reads as one unsharded run. A set that is not one complete run is a usage error (exit 2),
never a partial verdict: a missing or duplicated shard, shards of different plans (another target,
pipeline or mode: the fingerprint differs), or shards that split the plan differently (different
``--shard-timings`` files: a case in two shards or in none).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compile_checks.errors import UnwritableOutput, UsageError
from compile_checks.gate.commands import check_writable_file, exit_code, stdout_gone
from compile_checks.gate.junit import write_junit
from compile_checks.gate.outcome import Outcome, note_pipeline_verdicts
from compile_checks.gate.outputs import SCHEMA_VERSION, json_document, print_results
from compile_checks.vocab import ErrorKind, ExitCode, Pipeline

_SHARD_KEYS = ("index", "count", "plan_fingerprint", "plan_labels")


@dataclass
class MergedRun:
    outcomes: list[Outcome]
    seconds: float  # the longest shard's: the matrix's wall time
    notes: list[str]
    info: dict[str, Any]  # the merged JSON's ``merged`` entry


def read_shard(path: Path) -> dict[str, Any]:
    """One shard's ``--json`` document, checked to carry its ``shard`` entry."""
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror or e}") from None
    except ValueError as e:
        raise UsageError(f"{path}: not JSON: {e}") from None
    shard = doc.get("shard") if isinstance(doc, dict) else None
    if not isinstance(shard, dict) or any(k not in shard for k in _SHARD_KEYS) or "cases" not in doc:
        raise UsageError(f"{path}: not the --json output of a sharded gate run (gate --shard K/N --json)")
    if doc.get("schema_version") != SCHEMA_VERSION:  # its keys mean other things (compile_checks.gate.outputs)
        raise UsageError(
            f"{path}: written by another version of compile-checks (schema_version {doc.get('schema_version')}, "
            f"this one reads {SCHEMA_VERSION}): run every shard with one version"
        )
    return doc


def outcome_from_dict(d: dict[str, Any]) -> Outcome:
    """An :class:`Outcome` back from its ``to_dict()`` (keys it does not know are left out)."""
    names = {f.name for f in dataclasses.fields(Outcome)}
    kw = {k: v for k, v in d.items() if k in names}
    kw["pipeline"] = Pipeline(kw["pipeline"])
    for key, enum in (("error_kind", ErrorKind), ("retargeted_from", Pipeline)):
        if kw.get(key) is not None:
            kw[key] = enum(kw[key])
    return Outcome(**kw)


def merge_shards(paths: Sequence[Path]) -> MergedRun:
    """The shards at ``paths`` as one run, in plan order (module docstring for what is refused)."""
    docs = [(p, read_shard(p)) for p in paths]
    for key, what in (("count", "shard counts"), ("plan_fingerprint", "plans (targets, pipelines or mode differ)")):
        seen = {str(d["shard"][key]) for _, d in docs}
        if len(seen) > 1:
            raise UsageError(f"the files are shards of different runs: different {what}: {', '.join(sorted(seen))}")
    count = int(docs[0][1]["shard"]["count"])
    by_index: dict[int, list[Path]] = {}
    for path, d in docs:
        by_index.setdefault(int(d["shard"]["index"]), []).append(path)
    twice = {k: ps for k, ps in by_index.items() if len(ps) > 1}
    if twice:
        raise UsageError(
            "duplicated shard(s): "
            + "; ".join(f"{k}/{count} in {', '.join(map(str, ps))}" for k, ps in sorted(twice.items()))
        )
    missing = [k for k in range(1, count + 1) if k not in by_index]
    if missing:
        raise UsageError(f"missing shard(s) {', '.join(f'{k}/{count}' for k in missing)} of {count}")
    plan_labels: list[str] = list(docs[0][1]["shard"]["plan_labels"])
    found: dict[str, tuple[Path, dict[str, Any]]] = {}
    for path, d in docs:
        for case in d["cases"]:
            if case["label"] in found:
                raise UsageError(
                    f"case {case['label']} is in {found[case['label']][0]} and {path}: the shards split the plan "
                    "differently (give every shard the same --shard-timings file)"
                )
            found[case["label"]] = (path, case)
    absent = [label for label in plan_labels if label not in found]
    extra = [label for label in found if label not in plan_labels]
    if absent or extra:
        raise UsageError(
            f"the shards do not cover their plan: missing {', '.join(absent) or 'none'}; not planned "
            f"{', '.join(extra) or 'none'} (give every shard the same --shard-timings file)"
        )
    notes = list(dict.fromkeys(n for _, d in docs for n in d.get("notes", [])))
    shard_seconds = {f"{d['shard']['index']}/{count}": float(d.get("seconds", 0.0)) for _, d in docs}
    info = {"count": count, "plan_fingerprint": docs[0][1]["shard"]["plan_fingerprint"], "shard_seconds": shard_seconds}
    outcomes = [outcome_from_dict(found[label][1]) for label in plan_labels]
    note_pipeline_verdicts(outcomes)  # a case's pipelines may have run in different shards
    return MergedRun(outcomes, max(shard_seconds.values()), notes, info)


def run_merge(args: argparse.Namespace) -> ExitCode:
    """``merge``: read, check, print (table or ``--json``), write ``--junitxml``; the gate's exit code."""
    junit = Path(args.merge_junitxml) if args.merge_junitxml else None
    if junit is not None:
        check_writable_file(junit)
    run = merge_shards([Path(p) for p in args.merge_files])
    code = exit_code(run.outcomes)
    if junit is not None:
        try:
            write_junit(run.outcomes, junit, run.seconds)
        except OSError as e:
            raise UnwritableOutput(f"cannot write {junit}: {e.strerror or e}") from None
    try:
        if args.merge_json:
            print(json_document(run.outcomes, code, run.seconds, run.notes, extra={"merged": run.info}))
        else:
            title = f"compile-checks merge ({run.info['count']} shards)"
            print_results(run.outcomes, title=title, code=code, seconds=run.seconds, notes=run.notes, timings=False)
    except BrokenPipeError:
        stdout_gone()
    return code


__all__ = ["MergedRun", "merge_shards", "outcome_from_dict", "read_shard", "run_merge"]
