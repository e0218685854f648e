"""The user's source line of an FX node, from the stack trace Dynamo records on it.

Dynamo stores the Python stack of every traced call in ``node.meta["stack_trace"]``
(``File "x.py", line 12, in f`` / ``    code`` pairs, outermost first), and AOT
autograd / Inductor's post-grad passes carry that meta over to the nodes they
create. The innermost frame that is not PyTorch's or this checker's own machinery
is the line the user wrote: the ``paged_write`` call, the ``index_select`` of a
window gather.
"""

from __future__ import annotations

import os
import re
import site
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch.fx

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\s*$')

_TORCH_DIR = str(Path(torch.__file__ or "").resolve().parent)
_CHECKER_DIR = str(Path(__file__).resolve().parent.parent)  # the compile_checks package
# the compile_checks folder that holds *example user code* (the built-in scenarios and the vLLM
# @support_torch_compile example module), not machinery
_CHECKER_USER_CODE = ("scenarios" + os.sep,)


@dataclass(frozen=True)
class Frame:
    """One frame of a node's stack trace."""

    file: str
    line: int
    func: str
    code: str = ""

    @property
    def location(self) -> str:
        """``path:line`` with the path shortened for reading (see :func:`short_path`)."""
        return f"{short_path(self.file)}:{self.line}"


def parse_stack_trace(stack_trace: str | None) -> list[Frame]:
    """Frames of a ``meta["stack_trace"]`` string, outermost first (as Python prints them)."""
    if not stack_trace:
        return []
    frames: list[Frame] = []
    lines = stack_trace.splitlines()
    for i, text in enumerate(lines):
        m = _FRAME.match(text)
        if m is None:
            continue
        code = ""
        if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]):
            code = lines[i + 1].strip()
        frames.append(Frame(m.group("file"), int(m.group("line")), m.group("func"), code))
    return frames


# installed code (site-packages, the standard library) and this project's own engine library: a
# frame there is an op's wrapper, not the model line the user wants named
_INSTALLED_DIRS = tuple(
    str(Path(p).resolve())
    for p in {
        *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
        *site.getsitepackages(),
        site.getusersitepackages(),
    }
    if p and Path(p).is_dir()
)
_WRAPPER_PACKAGES = ("ar_paging", "vllm", "vllm_omni")


def is_wrapper_frame(frame: Frame) -> bool:
    """A user-visible frame that is library code (an installed package or ``ar_paging``), not the model."""
    path = str(Path(frame.file).resolve()) if os.path.isabs(frame.file) else frame.file
    if path.startswith(tuple(d + os.sep for d in _INSTALLED_DIRS)):
        return True
    return any(f"{os.sep}{pkg}{os.sep}" in path or path.startswith(pkg + os.sep) for pkg in _WRAPPER_PACKAGES)


def is_library_frame(frame: Frame) -> bool:
    """A frame inside PyTorch or inside this checker's machinery (not the code under check)."""
    path = str(Path(frame.file).resolve()) if os.path.isabs(frame.file) else frame.file
    if path.startswith(_TORCH_DIR + os.sep):
        return True
    if path.startswith(_CHECKER_DIR + os.sep):
        rel = path[len(_CHECKER_DIR) + 1 :]
        return not rel.startswith(_CHECKER_USER_CODE)
    return False


def user_frames(node: torch.fx.Node) -> list[Frame]:
    """The node's user frames, innermost first (empty when the node has no stack trace)."""
    frames = parse_stack_trace(node.meta.get("stack_trace"))
    return [f for f in reversed(frames) if not is_library_frame(f)]


def user_frame(node: torch.fx.Node) -> Frame | None:
    """The innermost user frame of ``node``: the line of user code that made it."""
    frames = user_frames(node)
    return frames[0] if frames else None


def user_line(node: torch.fx.Node) -> str | None:
    """``"file.py:LINE"`` of the user's model code that made ``node``, None without a stack trace.

    The innermost frame outside torch, this checker and library wrappers (:func:`is_wrapper_frame`):
    ``model.py:79`` rather than the op wrapper in site-packages it called. When every frame is a
    wrapper, the innermost one.
    """
    frames = user_frames(node)
    model = [f for f in frames if not is_wrapper_frame(f)]
    chosen = model or frames
    return chosen[0].location if chosen else None


def wrapper_line(node: torch.fx.Node) -> str | None:
    """The innermost library-wrapper frame below the model line (``ar_paging/read_path.py:58``), if any."""
    frames = user_frames(node)
    model = [i for i, f in enumerate(frames) if not is_wrapper_frame(f)]
    inner = frames[: model[0]] if model else []
    return inner[0].location if inner else None


def short_path(path: str) -> str:
    """``path`` relative to the working directory when under it, else to the ``sys.path`` entry
    holding it (``ar_paging/read_path.py``), else unchanged."""
    p = Path(path)
    if not p.is_absolute():
        return path
    roots = [Path.cwd(), *(Path(e) for e in sys.path if e)]
    best: str | None = None
    for root in roots:
        try:
            rel = str(p.relative_to(root.resolve()))
        except (ValueError, OSError):
            continue
        if best is None or len(rel) < len(best):
            best = rel
    return best if best is not None else path


def absolute_path(location: str) -> Path | None:
    """The file of a ``"path:line"`` location (as :func:`short_path` wrote it), if it exists."""
    path = location.rsplit(":", 1)[0]
    candidates = (
        [Path(path)] if Path(path).is_absolute() else [Path.cwd() / path, *(Path(e) / path for e in sys.path if e)]
    )
    for c in candidates:
        if c.is_file():
            return c.resolve()
    return None


__all__ = [
    "Frame",
    "absolute_path",
    "is_library_frame",
    "parse_stack_trace",
    "short_path",
    "user_frame",
    "user_frames",
    "user_line",
    "wrapper_line",
]
