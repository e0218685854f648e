"""What a ``gate`` / ``dump`` run writes and where, resolved once from the command line and the
``[tool.compile_checks]`` table: :class:`RunOptions`. The run itself (:func:`compile_checks.gate.commands.run_gate`)
then reads these fields, never ``args``; every output path is checked writable before anything compiles."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compile_checks.gate.outdir import check_writable_dir, check_writable_file
from compile_checks.gate.plan import GatePlan
from compile_checks.gate.warm_cache import cache_dir_checked

if TYPE_CHECKING:
    from compile_checks.gate.config import GateConfig


@dataclass(frozen=True)
class RunOptions:
    """Attributes: ``junit``: the JUnit file (``--junitxml``, the table's ``junitxml``); ``dump_root``: where
    each case's dump goes (``dump --out``, ``--dump-dir``, the table's ``dump_dir``); ``inductor_cache``: the
    warm cache every case is also run against; ``floor``: measure the compile floor; ``json`` / ``timings`` /
    ``verbose``: what is printed; ``jobs``: ``--jobs`` (None: automatic)."""

    junit: Path | None = None
    dump_root: Path | None = None
    inductor_cache: str | None = None
    floor: bool = False
    json: bool = False
    timings: bool = False
    verbose: bool = False
    jobs: int | None = None

    @classmethod
    def resolve(cls, args: argparse.Namespace, command: str, config: GateConfig | None) -> RunOptions:
        """The options of this run; an unwritable output raises ``UnwritableOutput`` (exit 3) now."""
        cache = getattr(args, "inductor_cache", None) or (config.inductor_cache if config else None)
        if cache is not None:
            where = (
                "--inductor-cache" if getattr(args, "inductor_cache", None) else "[tool.compile_checks] inductor_cache"
            )
            cache = str(cache_dir_checked(cache, where))
        junit = Path(args.junitxml) if args.junitxml else (config.junitxml if config else None)
        if command == "dump":
            dump_root: Path | None = Path(args.out)
        else:
            dump_root = Path(args.dump_dir) if args.dump_dir else (config.dump_dir if config else None)
        if junit is not None:
            check_writable_file(junit)
        if dump_root is not None:
            check_writable_dir(dump_root, "--out" if command == "dump" else "--dump-dir")
        return cls(
            junit=junit,
            dump_root=dump_root,
            inductor_cache=cache,
            floor=bool(getattr(args, "floor", None)),
            json=bool(args.json),
            timings=bool(args.timings),
            verbose=bool(getattr(args, "verbose", None)),
            jobs=args.jobs,
        )

    def applied(self, gate_plan: GatePlan) -> GatePlan:
        """``gate_plan`` with this run's per-case options (``--floor``, ``--inductor-cache``) set on each case."""
        changes: dict[str, Any] = {"floor": True} if self.floor else {}
        if self.inductor_cache is not None:
            changes["inductor_cache"] = self.inductor_cache
        if changes:
            gate_plan.cases = [dataclasses.replace(c, **changes) for c in gate_plan.cases]
        return gate_plan


__all__ = ["RunOptions"]
