"""The "vllm-piecewise" pipeline: a CPU SIMULATION of vLLM 0.33's GPU compile path.

On a CUDA host vLLM compiles through ``VllmBackend``: the dynamo graph is split at the
``splitting_ops`` (attention) with vLLM's ``split_graph``, every non-splitting piece is
compiled by Inductor with vLLM's ``PostGradPassManager`` installed as
``post_grad_custom_post_pass`` (it runs before Inductor's reinplace pass), the splitting
ops run eagerly between the pieces, and CUDA graphs wrap the pieces. This CPU host cannot
run that backend; :class:`PiecewiseSimulation` reproduces the parts that decide whether a
pool copy survives:

* vLLM's own ``split_graph`` at the config's ``splitting_ops`` (vLLM's GPU default, from
  ``CompilationConfig.set_splitting_ops_for_v1``, unless the module's config names its own);
* vLLM's own ``PostGradPassManager``, configured from the ``VllmConfig``, under a
  ``pass_context``; its ``FixFunctionalizationPass`` looks up ``torch.ops._C.*`` names that
  exist only with vLLM's CUDA extension, so placeholder ops with those names are defined
  for the duration of the compile (they are never called);
* each piece compiled by the check's instrumented Inductor, so every piece's post-grad graph
  is analysed (one report region per piece).

Not simulated: CUDA graphs, compile ranges / per-size compiles, vLLM's compile cache,
``VllmIRInplaceFunctionalizationPass`` (a pre-grad pass for vLLM IR ops) and the CUDA-only
fusion passes (off in vLLM's default pass config for this model anyway).
"""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch._inductor.config as inductor_cfg

from compile_checks.pipelines.vllm import (
    is_vllm_compiled_module,
    make_vllm_config,
    require_check_backend,
    run_under_vllm,
)
from compile_checks.pipelines.vllm_env import vllm_module

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from compile_checks.session import CloneCheck

SIMULATION_LABEL = "CPU SIMULATION of vLLM's GPU path (VllmBackend graph splitting + PostGradPassManager)"


def default_splitting_ops() -> list[str]:
    """The ops vLLM splits at on GPU: ``set_splitting_ops_for_v1`` of a VLLM_COMPILE config."""
    cfg = vllm_module("vllm.config")
    compilation = cfg.CompilationConfig(mode=cfg.CompilationMode.VLLM_COMPILE)
    compilation.set_splitting_ops_for_v1(all2all_backend="naive")
    return list(compilation.splitting_ops or [])


def fix_functionalization_c_ops() -> list[str]:
    """The ``torch.ops._C.<name>`` names vLLM's FixFunctionalizationPass looks up (read from its source)."""
    fix = vllm_module("vllm.compilation.passes.utility.fix_functionalization")
    return sorted(set(re.findall(r"torch\.ops\._C\.(\w+)", inspect.getsource(fix.FixFunctionalizationPass))))


@contextlib.contextmanager
def placeholder_c_ops(names: Sequence[str]) -> Iterator[list[str]]:
    """Define ``_C::<name>`` for each name vLLM's CUDA extension would provide and this host lacks.

    The placeholders have no kernel: the pass only compares ``auto_functionalized`` targets with
    them, which no graph here contains. They are removed (and torch.ops' cache cleared) on exit.
    """
    missing = [n for n in names if not hasattr(torch.ops._C, n)]
    lib = torch.library.Library("_C", "FRAGMENT") if missing else None
    try:
        for name in missing:
            assert lib is not None
            lib.define(f"{name}(Tensor placeholder) -> ()")
        yield missing
    finally:
        if lib is not None:
            lib._destroy()


def _counting_pass_manager(vllm_config: VllmConfig, on_run: Callable[[], None]) -> Any:
    """vLLM's PostGradPassManager (the platform's), configured as VllmBackend does; ``on_run`` per graph."""
    platforms = vllm_module("vllm.platforms")
    utils = vllm_module("vllm.utils.import_utils")
    base = utils.resolve_obj_by_qualname(platforms.current_platform.get_pass_manager_cls())

    class CountingPassManager(base):  # type: ignore[misc, valid-type]
        def __call__(self, graph: torch.fx.Graph) -> None:
            on_run()
            super().__call__(graph)

    manager = CountingPassManager()
    manager.configure(vllm_config)
    return manager


class PiecewiseSimulation:
    """A dynamo backend: vLLM's ``split_graph`` + ``PostGradPassManager``, pieces compiled by the check.

    Attributes after a compile: ``pieces`` (submodule names compiled), ``splitting_pieces``
    (run eagerly), ``pass_manager_runs`` (graphs vLLM's PostGradPassManager ran on),
    ``placeholder_ops`` (the ``_C`` names that had to be defined).
    """

    def __init__(self, check: CloneCheck, vllm_config: VllmConfig, splitting_ops: Sequence[str]) -> None:
        self.check = check
        self.vllm_config = vllm_config
        self.splitting_ops = list(splitting_ops)
        self.pieces: list[str] = []
        self.splitting_pieces: list[str] = []
        self.placeholder_ops: list[str] = []
        self.pass_manager_runs = 0

    def _count_pass_manager_run(self) -> None:
        self.pass_manager_runs += 1

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **_: Any) -> Callable[..., Any]:
        backends = vllm_module("vllm.compilation.backends")
        inductor_pass = vllm_module("vllm.compilation.passes.inductor_pass")
        Range = vllm_module("vllm.config.utils").Range

        platform = vllm_module("vllm.platforms").current_platform
        pass_manager = _counting_pass_manager(self.vllm_config, self._count_pass_manager_run)
        split_gm, items = backends.split_graph(gm, self.splitting_ops)
        self.splitting_pieces += [i.submod_name for i in items if i.is_splitting_graph]
        to_compile = [i.submod_name for i in items if not i.is_splitting_graph]
        fake_args = [
            node.meta["example_value"] if isinstance(real, torch.Tensor) else real
            for node, real in zip(gm.graph.find_nodes(op="placeholder"), example_inputs)
        ]
        with (
            placeholder_c_ops(fix_functionalization_c_ops()) as placeholders,
            inductor_pass.pass_context(Range(start=1, end=sys.maxsize)),
            inductor_cfg.patch({platform.pass_key: pass_manager}),
        ):
            self.placeholder_ops = placeholders
            _PieceCompiler(split_gm, to_compile, self).run(*fake_args)
        return split_gm

    def compile_piece(self, name: str, submod: torch.fx.GraphModule, args: Sequence[Any]) -> Callable[..., Any]:
        self.pieces.append(name)
        return self.check.probe.backend(submod, list(args))


class _PieceCompiler(torch.fx.Interpreter):
    """Walk the split graph on fake values (as vLLM's PiecewiseCompileInterpreter does) and
    replace each piece to compile with the check's compiled callable."""

    def __init__(self, module: torch.fx.GraphModule, names: list[str], sim: PiecewiseSimulation) -> None:
        super().__init__(module)
        self.names = names
        self.sim = sim
        self.extra_traceback = False

    def call_module(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        submod = self.fetch_attr(target)
        outputs = submod.graph.output_node().args[0]
        out = torch.fx.map_arg(outputs, lambda n: n.meta["example_value"])
        if target in self.names:
            self.module.__dict__[target] = self.sim.compile_piece(target, submod, args)
        return out


def compile_piecewise(
    check: CloneCheck,
    fn: Callable[..., Any],
    inductor_config: Mapping[str, Any],
    *,
    dynamic: bool | None = None,
    vllm_config: VllmConfig | None = None,
) -> Callable[..., Any]:
    """``fn`` compiled through the simulation; a ``@support_torch_compile`` module through vLLM's
    wrapper, whose backend resolver then points at the simulation. The returned callable's
    ``simulation`` attribute is the :class:`PiecewiseSimulation` (pieces, pass-manager runs)."""
    module = is_vllm_compiled_module(fn)
    config = fn.vllm_config if module else (vllm_config or make_vllm_config())  # type: ignore[attr-defined]
    splitting_ops = list(config.compilation_config.splitting_ops or []) or default_splitting_ops()
    sim = PiecewiseSimulation(check, config, splitting_ops)
    if module:
        require_check_backend(fn, dynamic=dynamic)
        compiled: Callable[..., Any] = fn
    else:
        compiled = torch.compile(fn, backend=sim, dynamic=dynamic)
    run = run_under_vllm(check, fn, compiled, inductor_config, config, sim)
    run.simulation = sim  # type: ignore[attr-defined]
    return run


__all__ = [
    "SIMULATION_LABEL",
    "PiecewiseSimulation",
    "compile_piecewise",
    "default_splitting_ops",
    "fix_functionalization_c_ops",
    "placeholder_c_ops",
]
