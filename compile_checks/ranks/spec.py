"""``RankedCase``: one case checked on every rank of a ``torch.distributed`` group.

A :class:`~compile_checks.case.Case` holds the tensors it is checked on, and tensors do not
cross a process boundary: each rank builds its own case, with its shard of the model and
of the pools, inside its own process. A ranked case therefore names a *factory*,
``make_case(rank, world_size) -> Case``, called in each rank once the process group is up,
and declares what the gate plans with (name, world size, expectation, pipeline). It holds no
tensors and imports no torch, so the gate lists it without compiling anything.

The factory is a ``"path/to/file.py:NAME"`` / ``"package.module:NAME"`` string or a module-level
function (one the rank can import again: what :class:`FactoryRef` records).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compile_checks.errors import CompileChecksError
from compile_checks.vocab import Pipeline, pipeline_named

if TYPE_CHECKING:
    from compile_checks.case import Case

# gate/targets.py loads a target file under this prefix; such a module is re-loaded by file in a rank
_TARGET_MODULE_PREFIX = "_compile_checks_target_"


class RankedCaseError(CompileChecksError, ValueError):
    """A ranked case is malformed, or its factory cannot be found again in a rank."""


@dataclass(frozen=True)
class FactoryRef:
    """Where a rank finds ``make_case``: a module (by import name, or by file) and the name in it."""

    module: str  # import name; for a file, the name it was loaded under
    name: str  # attribute (a dotted qualname for a nested class attribute)
    file: str | None = None  # set when the module is not importable by name (a target file, a script)

    @classmethod
    def of(cls, factory: str | Callable[..., Any], base_dir: str | Path | None = None) -> FactoryRef:
        if isinstance(factory, str):
            where, sep, name = factory.rpartition(":")
            if not sep or not where or not name:
                raise RankedCaseError(f"factory {factory!r}: expected 'path/to/file.py:NAME' or 'package.module:NAME'")
            if where.endswith(".py") or "/" in where or "\\" in where:
                path = Path(where)
                if not path.is_absolute():
                    path = Path(base_dir or Path.cwd()) / path
                path = path.resolve()
                return cls(f"{_TARGET_MODULE_PREFIX}{abs(hash(str(path)))}", name, str(path))
            return cls(where, name)
        if not callable(factory):
            raise RankedCaseError(f"factory must be callable or a 'file.py:NAME' string, got {type(factory).__name__}")
        module, qualname = getattr(factory, "__module__", None), getattr(factory, "__qualname__", "")
        if module is None or "<locals>" in qualname or "<lambda>" in qualname:
            raise RankedCaseError(
                f"factory {qualname or factory!r}: a rank runs in its own process and must import it again; "
                "define it at module level (a lambda or a nested function cannot be found there)"
            )
        source = inspect.getsourcefile(factory)
        file = None if source is None else str(Path(source).resolve())
        if module == "__main__" or module.startswith(_TARGET_MODULE_PREFIX):
            if file is None:
                raise RankedCaseError(f"factory {qualname}: its module {module!r} has no source file to load in a rank")
            module = f"{_TARGET_MODULE_PREFIX}{abs(hash(file))}"
        return cls(module, qualname, file)

    def load(self) -> Callable[[int, int], Case]:
        """The factory, imported in this process: by name, else (a target file, a script, a module only the
        parent's ``sys.path`` had) from its file, loaded once under ``module`` with its folder on ``sys.path``."""
        module = sys.modules.get(self.module)
        if module is None and not self.module.startswith(_TARGET_MODULE_PREFIX):
            try:
                module = importlib.import_module(self.module)
            except ModuleNotFoundError as e:
                if e.name != self.module or self.file is None:
                    raise
        if module is None:
            module = self._load_file()
        value: Any = module
        for part in self.name.split("."):
            value = getattr(value, part, None)
            if value is None:
                raise RankedCaseError(f"factory {self}: {self.file or self.module} has no attribute {self.name!r}")
        if not callable(value):
            raise RankedCaseError(f"factory {self}: {self.name} is a {type(value).__name__}, not a callable")
        return value  # type: ignore[no-any-return]

    def _load_file(self) -> Any:
        if self.file is None:
            raise RankedCaseError(f"factory {self}: module {self.module!r} cannot be imported and has no file")
        spec = importlib.util.spec_from_file_location(self.module, self.file)
        if spec is None or spec.loader is None:
            raise RankedCaseError(f"factory {self}: cannot load {self.file}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.module] = module
        sys.path.insert(0, str(Path(self.file).parent))  # the file imports its siblings, as in the gate
        spec.loader.exec_module(module)
        return module

    def __str__(self) -> str:
        return f"{self.file or self.module}:{self.name}"


@dataclass(frozen=True)
class RankedCase:
    """A case run in ``world_size`` processes, one per rank, each through ``run_case`` on its own shard.

    Attributes:
        name: unique within a gate run (tables, JUnit); each rank's report is keyed ``rank0``, ``rank1`` ...
        make_case: ``make_case(rank, world_size) -> Case``, called in the rank's process after
            ``torch.distributed.init_process_group``: it builds that rank's model shard, pools and driver.
        world_size: number of ranks (processes).
        expect_clean: every rank's expectation (True: no rank clones); the built ``Case``'s own
            ``expect_clean`` is replaced by it, so the expectation is declared once, here.
        expect_clean_by_rank: one expectation per rank instead (an asymmetric layout: only rank 1 clones);
            ``expect_clean`` is then ``all(...)`` (what the gate's "expected" column shows).
        pipeline: the pipeline every rank compiles with (replaces the built case's).
        backend: ``torch.distributed`` backend; None: ``nccl`` when CUDA is available, else ``gloo``.
        timeout_s: the whole run's limit; a rank still running then is killed and reported hung.
        description: one line for tables.
        base_dir: where a relative ``"file.py:NAME"`` factory is found (default: the working directory).
    """

    name: str
    make_case: str | Callable[[int, int], Case]
    world_size: int = 2
    expect_clean: bool = True
    expect_clean_by_rank: tuple[bool, ...] | None = None
    pipeline: Pipeline = Pipeline.STOCK
    backend: str | None = None
    timeout_s: float = 300.0
    description: str = ""
    base_dir: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise RankedCaseError(f"RankedCase.name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise RankedCaseError(f"RankedCase {self.name!r}: world_size must be an int >= 1, got {self.world_size!r}")
        object.__setattr__(
            self, "pipeline", pipeline_named(self.pipeline, f"RankedCase {self.name!r}", RankedCaseError)
        )
        by_rank = self.expect_clean_by_rank
        if by_rank is not None:
            by_rank = tuple(by_rank)
            if len(by_rank) != self.world_size or not all(isinstance(e, bool) for e in by_rank):
                raise RankedCaseError(
                    f"RankedCase {self.name!r}: expect_clean_by_rank needs one bool per rank ({self.world_size}), "
                    f"got {self.expect_clean_by_rank!r}"
                )
            if self.expect_clean is False and all(by_rank):
                raise RankedCaseError(
                    f"RankedCase {self.name!r}: expect_clean=False contradicts expect_clean_by_rank={by_rank} "
                    "(every rank clean); give one of them"
                )
            object.__setattr__(self, "expect_clean_by_rank", by_rank)
            object.__setattr__(self, "expect_clean", all(by_rank))  # what the gate's "expected" column shows
        if not isinstance(self.expect_clean, bool):
            raise RankedCaseError(f"RankedCase {self.name!r}: expect_clean must be a bool, got {self.expect_clean!r}")
        if self.timeout_s <= 0:
            raise RankedCaseError(f"RankedCase {self.name!r}: timeout_s must be > 0, got {self.timeout_s!r}")
        self.factory_ref()  # a lambda / nested function fails here, in the parent, not in every rank

    def factory_ref(self) -> FactoryRef:
        return FactoryRef.of(self.make_case, self.base_dir)

    def expectation(self, rank: int) -> bool:
        """What rank ``rank`` must come to: clean (True) or cloning (False)."""
        if self.expect_clean_by_rank is not None:
            return self.expect_clean_by_rank[rank]
        return bool(self.expect_clean)

    @property
    def expected_pipelines(self) -> tuple[Pipeline, ...] | None:
        """None: one expectation for every pipeline (as a ``Case`` with a bool ``expect_clean``)."""
        return None

    def expects_clean_on(self, pipeline: Pipeline | str) -> bool:
        """The gate's expectation under any pipeline: clean on every rank or not (per rank: :meth:`expectation`)."""
        return bool(self.expect_clean)

    @property
    def expects_clean(self) -> bool:
        return bool(self.expect_clean)

    def replace(self, **changes: Any) -> RankedCase:
        return dataclasses.replace(self, **changes)


__all__ = ["FactoryRef", "RankedCase", "RankedCaseError"]
