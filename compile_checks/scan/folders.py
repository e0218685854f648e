"""Which artifacts a PATH holds, and the folder formats: Inductor debug folders and depyf / vLLM dumps.

* ``TORCH_TRACE`` logs (:mod:`.trace`): a ``dedicated_log_torch_trace_*.log`` file, or a folder of
  them (one per rank / process, in any sub-folder);
* an Inductor debug folder (``TORCH_COMPILE_DEBUG=1`` / ``torch._inductor.config.trace.enabled``):
  per compile a ``torchinductor/<model>__<id>/`` folder with ``fx_graph_transformed.py`` (the graph
  after the post-grad passes, written by ``V.debug.fx_graph_transformed``) and ``output_code.py``;
* a depyf dump (``depyf.prepare_debug``; vLLM's ``VLLM_DEBUG_DUMP_PATH`` per-rank folders): per
  compiled function ``__compiled_fn_N.AFTER_POST_GRAD.k.py`` and ``__compiled_fn_N.kernel_k.py``.

Anything else is an :class:`UnknownFormatError` naming what was looked for: never an empty, clean scan.
"""

from __future__ import annotations

import re
from pathlib import Path

from compile_checks.scan.artifacts import GraphArtifacts, ScanError, UnknownFormatError
from compile_checks.scan.trace import TRACE_PREFIX, is_trace_file, read_trace_files

_RANK = re.compile(r"rank_?(\d+)")
_DEPYF_POST_GRAD = re.compile(r"^(?P<fn>.+)\.AFTER_POST_GRAD\.(?P<k>\d+)\.py$")
LOOKED_FOR = (
    f"a TORCH_TRACE log ({TRACE_PREFIX}*.log), an Inductor debug folder (fx_graph_transformed.py + "
    "output_code.py) or a depyf / vLLM dump (__compiled_fn_N.AFTER_POST_GRAD.k.py)"
)


def _rank(path: Path) -> int | None:
    for part in reversed(path.parts):
        m = _RANK.search(part)
        if m:
            return int(m.group(1))
    return None


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _debug_folder(root: Path) -> list[GraphArtifacts]:
    out = []
    for post_grad in sorted(root.rglob("fx_graph_transformed.py")):
        folder = post_grad.parent
        code = folder / "output_code.py"
        out.append(
            GraphArtifacts(
                origin=str(folder),
                rank=_rank(folder.relative_to(root)),
                compile_id=folder.name,
                post_grad=_read(post_grad),
                output_code=_read(code) if code.is_file() else None,
                notes=["Inductor debug folder: input sources and storages are not recorded there"],
            )
        )
    return out


def _depyf_dump(root: Path) -> list[GraphArtifacts]:
    out = []
    for post_grad in sorted(root.rglob("*.AFTER_POST_GRAD.*.py")):
        m = _DEPYF_POST_GRAD.match(post_grad.name)
        if m is None:
            continue
        kernel = post_grad.with_name(f"{m['fn']}.kernel_{m['k']}.py")
        out.append(
            GraphArtifacts(
                origin=str(post_grad),
                rank=_rank(post_grad.parent.relative_to(root)) if post_grad.parent != root else None,
                compile_id=m["fn"],
                index=int(m["k"]),
                post_grad=_read(post_grad),
                output_code=_read(kernel) if kernel.is_file() else None,
                notes=["depyf dump: input sources and storages are not recorded there"],
            )
        )
    return out


def read_path(path: Path) -> list[GraphArtifacts]:
    """Every compiled graph under ``path``, whatever it holds (see the module docstring)."""
    if not path.exists():
        raise ScanError(f"{path}: no such file or folder")
    if path.is_file():
        if not is_trace_file(path):
            raise UnknownFormatError(f"{path}: not {LOOKED_FOR}")
        found = read_trace_files([path])
    else:
        logs = sorted(p for p in path.rglob("*.log") if p.is_file() and is_trace_file(p))
        found = read_trace_files(logs) if logs else _debug_folder(path) or _depyf_dump(path)
        if not logs and not found:
            raise UnknownFormatError(f"{path}: holds no compile artifacts; looked for {LOOKED_FOR}")
    if not found:
        raise ScanError(f"{path}: the trace records no compiled graph (was anything compiled while it was written?)")
    return found


__all__ = ["LOOKED_FOR", "read_path"]
