"""Analysis-only settles Inductor's buffer choices from its generated code, for the graphs that hold one.

Analysis-only stops each compile after the post-grad passes and runs that graph: the verdict needs no
kernel. A site whose buffer is Inductor's lowering choice (:attr:`CloneSite.buffer_is_inductors_choice`)
is the exception: only Inductor's code says whether it gets one. For a graph that holds such a site the
probe lets Inductor lower, schedule and generate its code (the wrapper and the kernels' source: no kernel
is built), reads which buffers that code gives memory of its own
(:func:`~compile_checks.check.graph.generated_buffers.lowered_buffers`), and then runs the post-grad graph
as for every other graph. A graph without such a site costs what it cost before.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from unittest import mock

import torch
import torch.fx

from compile_checks.check.graph.sites import CloneSite


def needs_code(sites: Sequence[CloneSite]) -> bool:
    """Some site's buffer is Inductor's choice: only its generated code settles it."""
    return any(s.buffer_is_inductors_choice for s in sites)


def graph_copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` as it is now (the final post-grad graph), apart from whatever lowering does to it afterwards."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return torch.fx.GraphModule(gm, graph)


def probe_cpu_isa(cache_dir: str | None = None) -> None:
    """Run Inductor's CPU vector-ISA probe now, outside the compile's fresh cache folder.

    Why: the checks compile with ``force_disable_caches`` (caches of *graphs* lie), under which
    Inductor gives each compile a fresh temporary cache folder; the first C++ codegen in a process
    then re-builds and runs its ISA probe programs there (four g++ builds: ~8 s of a first full
    compile's ~10 s on the 2-core box, ~0.1 s with the probe done here). The probe says what the
    CPU and compiler can build; it does not depend on any graph, so its results kept in Inductor's
    default cache folder are safe to reuse. Done once per process (Inductor caches it).

    ``cache_dir``: the folder to probe in, when called from inside a compile (the folder that was
    Inductor's before the compile entered its fresh one).
    """
    from torch._inductor import cpu_vec_isa

    env = {} if cache_dir is None else {"TORCHINDUCTOR_CACHE_DIR": cache_dir}
    with mock.patch.dict(os.environ, env):
        cpu_vec_isa.valid_vec_isa_list()


def current_cache_dir() -> str:
    """Inductor's cache folder now (read before a compile enters its fresh one)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return cache_dir()


__all__ = ["current_cache_dir", "graph_copy", "needs_code", "probe_cpu_isa"]
