"""Where a logged graph came from: compiled in the traced process, or served by torch's compile caches.

A warm ``TORCHINDUCTOR_CACHE_DIR`` hands a process an artifact another process compiled, and the cache
keys leave out how the inputs alias (seen on torch 2.14: a layout with K and V as views of one ``(2, ...)``
allocation and one with two allocations load each other's artifact). The trace holds what tells them apart:

* a served compile logs an ``artifact`` record named ``aotautograd_cache_hit`` / ``fx_graph_cache_hit``
  (:class:`~compile_checks.vocab.CacheServed`), beside the post-grad graph and output code it loaded;
* the output code's benchmark harness (``get_args()``), written when the artifact was compiled, builds
  inputs that were views of one storage then from one ``_shared_storage_N``;
* Dynamo's ``describe_tensor`` records give each input's storage in the traced process.

A harness that groups inputs Dynamo now sees in separate storages (or the reverse) is an artifact
compiled for other aliasing than the inputs it runs on. No harness (another wrapper), or inputs the
trace does not map, and nothing is said.
"""

from __future__ import annotations

import re

from compile_checks.scan.artifacts import GraphArtifacts
from compile_checks.scan.inputs import describe_input
from compile_checks.vocab import CacheProblem, CacheServed

CACHE_FIX = (
    "clear that cache (delete the folder, or `torch._inductor.codecache.FxGraphCache.clear()` and "
    "`torch._functorch._aot_autograd.autograd_cache.AOTAutogradCache.clear()`), or key it per allocation layout: "
    "a TORCHINDUCTOR_CACHE_DIR of its own per layout (or `torch._inductor.config.force_disable_caches = True` "
    "where the layout changes), and check it with `compile-checks gate --inductor-cache DIR`"
)
SERVED_BY: dict[str, str] = {CacheServed.AOTAUTOGRAD: "AOTAutograd cache", CacheServed.FX_GRAPH: "FX graph cache"}
_HARNESS = re.compile(r"^def get_args\(\):\n((?:[ \t]+.*\n?|\n)*)", re.M)
_VIEW_OF_SHARED = re.compile(r"^\s*(\w+) = torch\.as_strided\((_shared_storage_\d+),", re.M)
_OWN_STORAGE = re.compile(r"^\s*(\w+) = rand_strided\(", re.M)


def harness_storages(code: str) -> dict[str, str] | None:
    """Input name -> the storage the artifact's ``get_args()`` builds it in (its own name when alone);
    None when the code has no such harness."""
    m = _HARNESS.search(code)
    if m is None:
        return None
    body = m.group(1)
    out = {name: name for name in _OWN_STORAGE.findall(body) if not name.startswith("_shared_storage_")}
    out.update(dict(_VIEW_OF_SHARED.findall(body)))
    return out


def _groups(pairs: dict[str, object]) -> list[list[str]]:
    by: dict[object, list[str]] = {}
    for name, key in pairs.items():
        by.setdefault(key, []).append(name)
    return [sorted(names) for names in by.values() if len(names) > 1]


def alias_mismatches(art: GraphArtifacts) -> list[str]:
    """How the aliasing the artifact was compiled for differs from the inputs Dynamo describes (one line each)."""
    if not art.output_code or not art.inputs:
        return []
    compiled = harness_storages(art.output_code)
    if compiled is None:
        return []
    now = {n: s.storage for n, s in art.inputs.items() if s.storage is not None and n in compiled}
    compiled = {n: compiled[n] for n in now}
    out = []
    for names in _groups(dict(compiled)):
        if len({now[n] for n in names}) > 1:
            out.append(
                f"the artifact was compiled for {_names(art, names)} in one storage (its harness builds them from one "
                "`_shared_storage`), while Dynamo describes them as separate storages"
            )
    for names in _groups(dict(now)):
        if len({compiled[n] for n in names}) > 1:
            out.append(
                f"the artifact was compiled for {_names(art, names)} in separate storages, while Dynamo describes "
                "them as one storage"
            )
    return out


def _names(art: GraphArtifacts, names: list[str]) -> str:
    return ", ".join(f"`{describe_input(art, n)}`" for n in names)


def alias_finding(art: GraphArtifacts) -> str | None:
    """The failing :attr:`~compile_checks.vocab.CacheProblem.CACHE_ALIASING` finding of a served graph whose
    artifact was compiled for other input aliasing than this run's; None otherwise.

    Not a note: the served code addresses the storages it was compiled for. Served to two storages, an
    artifact compiled for one copies from before the start of the input it was handed (its C++ reads
    ``in_ptr0 + (-8192 + x0)``, seen on torch 2.14, CPU); served to one storage, an artifact compiled for
    two treats the views as separate allocations (without the copy the cold compile of that layout makes).
    """
    if not art.served_from:
        return None
    mismatches = alias_mismatches(art)
    if not mismatches:
        return None
    caches = " and ".join(SERVED_BY.get(s, s) for s in art.served_from)
    artifact = f"`{art.output_file}`" if art.output_file else "its output code"
    return (
        f"{CacheProblem.CACHE_ALIASING}: {art.label} ran an artifact served from the {caches} ({artifact}) that "
        f"was compiled for other input aliasing than this run's: {'; '.join(mismatches)}; the served code addresses "
        f"the storages it was compiled for, not these; fix: {CACHE_FIX}"
    )


def origin_notes(art: GraphArtifacts) -> list[str]:
    """The graph's origin, for the scan's notes: the caches that served it, and any aliasing mismatch."""
    if not art.served_from:
        return []
    caches = " and ".join(SERVED_BY.get(s, s) for s in art.served_from)
    notes = [
        f"served from the {caches} ({', '.join(art.served_from)}): compiled in another process, whose inputs may "
        "have aliased differently"
    ]
    return notes + [f"cache_origin: {m}" for m in alias_mismatches(art)]


__all__ = ["CACHE_FIX", "SERVED_BY", "alias_finding", "alias_mismatches", "harness_storages", "origin_notes"]
