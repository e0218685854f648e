"""The C++ CPU kernel of ``ar_paging::paged_write`` (``ar_paging/csrc/paged_write.cpp``).

It must be the kernel the dispatcher runs for CPU tensors when it is built, the
Python kernel when it is disabled or cannot be built (with a warning that says
why), hold every metadata check of the Python kernel with the same ValueError
message before anything is written, and give the same pools eager and compiled.

The native kernel is reached through ``redispatch`` to the CPU key, so checks
on other devices (a ``meta`` slot mapping, which the dispatcher would send to the
fake) still run its C++ code; the Python kernel is called as the function the
op registers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable

import _warm_python as warm_python
import pytest
import torch
from test_paged_write import BAD_SLOT_VALUES, BAD_WRITES, _args

import ar_paging

_impl = sys.modules["ar_paging.paged_write"]
OP = torch.ops.ar_paging.paged_write.default
CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
NATIVE_EVENT = "ar_paging::paged_write_native"
H, D = 2, 4

NATIVE_DISABLED = ar_paging.native.mode() == "off"
needs_native = pytest.mark.skipif(NATIVE_DISABLED, reason="AR_PAGING_NATIVE=0 in this environment")


def native_write(*args: torch.Tensor) -> None:
    """The C++ kernel whatever the arguments' devices (the dispatcher would send meta tensors to the fake)."""
    OP.redispatch(CPU_KEYS, *args)


def python_write(*args: torch.Tensor) -> None:
    _impl._paged_write_impl(*args)


def unchecked_write(k_pool, v_pool, new_k, new_v, slot_mapping) -> None:
    """Negative control: the write without any check (what the kernels guard)."""
    slots = slot_mapping.reshape(-1)
    k_pool.index_copy_(0, slots, new_k.reshape(-1, *new_k.shape[-2:]))
    v_pool.index_copy_(0, slots, new_v.reshape(-1, *new_v.shape[-2:]))


KERNELS: dict[str, Callable[..., None]] = {"native": native_write, "python": python_write}


def rejection(write: Callable[..., None], args: dict, match: str) -> str:
    """The check: ``write`` raises a ValueError naming ``match`` and leaves both pools untouched; its message."""
    k_before, v_before = args["k_pool"].clone(), args["v_pool"].clone()
    try:
        write(*args.values())
    except ValueError as err:
        message = str(err)
    except Exception as err:  # any other failure is a failed check
        raise AssertionError(f"expected a ValueError naming {match!r}, got {type(err).__name__}: {err}") from err
    else:
        raise AssertionError(f"expected a ValueError naming {match!r}; nothing was raised")
    assert match in message, f"ValueError does not name {match!r}: {message}"
    assert torch.equal(args["k_pool"], k_before), "a rejected commit wrote into k_pool"
    assert torch.equal(args["v_pool"], v_before), "a rejected commit wrote into v_pool"
    return message


def first_line(message: str) -> str:
    """The message without a C++ backtrace (present only with TORCH_SHOW_CPP_STACKTRACES=1)."""
    return message.split("\nException raised from")[0]


# ── which kernel is registered ──────────────────────────────────────────────


def profiled_names(fn: Callable[[], object]) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return [event.name for event in prof.events()]


@needs_native
def test_native_kernel_is_the_registered_cpu_kernel():
    assert ar_paging.paged_write_kernel() == "native", _impl.NATIVE_UNAVAILABLE_BECAUSE
    assert torch._C._dispatch_has_kernel_for_dispatch_key("ar_paging::paged_write", "CPU")
    cpu_line = [ln for ln in torch._C._dispatch_dump("ar_paging::paged_write").splitlines() if ln.startswith("CPU:")]
    assert cpu_line and "paged_write.cpp" in cpu_line[0], cpu_line
    k, v = torch.zeros(8, H, D), torch.zeros(8, H, D)
    names = profiled_names(
        lambda: torch.ops.ar_paging.paged_write(k, v, torch.ones(2, H, D), torch.ones(2, H, D), torch.tensor([1, 5]))
    )
    assert NATIVE_EVENT in names and "aten::index_copy_" in names, names
    assert k[[1, 5]].eq(1).all()


RUN_IN_SUBPROCESS = textwrap.dedent(
    """
    import warnings
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        import torch, ar_paging
    k, v = torch.zeros(8, 2, 4), torch.zeros(8, 2, 4)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ops.ar_paging.paged_write(k, v, torch.ones(2, 2, 4), torch.ones(2, 2, 4), torch.tensor([1, 5]))
    print("kernel", ar_paging.paged_write_kernel())
    print("cpu_key", torch._C._dispatch_has_kernel_for_dispatch_key("ar_paging::paged_write", "CPU"))
    print("native_event", any(e.name == "ar_paging::paged_write_native" for e in prof.events()))
    print("written", bool(k[[1, 5]].eq(1).all()))
    print("warnings", [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)])
    """
)


def run_python(env_overrides: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_overrides}
    cmd = [sys.executable, "-c", RUN_IN_SUBPROCESS]
    return warm_python.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)


def parse(out: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in out.strip().splitlines() if " " in line)


def test_native_disabled_registers_the_python_kernel():
    """``AR_PAGING_NATIVE=0``: no CPU kernel, the Python one runs (the control of the registration test)."""
    proc = run_python({"AR_PAGING_NATIVE": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = parse(proc.stdout)
    assert got["kernel"] == "python" and got["cpu_key"] == "False" and got["native_event"] == "False", got
    assert got["written"] == "True" and got["warnings"] == "[]", got


def test_missing_compiler_warns_and_falls_back_to_python(tmp_path):
    proc = run_python({"AR_PAGING_NATIVE": "auto", "AR_PAGING_NATIVE_CACHE": str(tmp_path), "CXX": "no-such-c++"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = parse(proc.stdout)
    assert got["kernel"] == "python" and got["cpu_key"] == "False" and got["written"] == "True", got
    assert "no C++ compiler" in got["warnings"] and "no-such-c++" in got["warnings"], got
    assert "pure-Python kernel" in got["warnings"], got


def test_missing_compiler_with_native_required_is_an_import_error(tmp_path):
    proc = run_python({"AR_PAGING_NATIVE": "1", "AR_PAGING_NATIVE_CACHE": str(tmp_path), "CXX": "no-such-c++"})
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr and "no C++ compiler" in proc.stderr, proc.stderr[-3000:]


def test_bad_native_mode_is_named():
    proc = run_python({"AR_PAGING_NATIVE": "maybe"})
    assert proc.returncode != 0 and "AR_PAGING_NATIVE='maybe'" in proc.stderr, proc.stderr[-3000:]


@needs_native
def test_debug_switch_reaches_the_native_kernel(debug_checks):
    assert torch.ops.ar_paging_native.debug_checks_enabled()
    ar_paging.set_debug_checks(False)
    assert not torch.ops.ar_paging_native.debug_checks_enabled()
    ar_paging.set_debug_checks(True)
    k, v = torch.zeros(8, H, D), torch.zeros(8, H, D)
    names = profiled_names(
        lambda: torch.ops.ar_paging.paged_write(k, v, torch.ones(2, H, D), torch.ones(2, H, D), torch.tensor([1, 5]))
    )
    assert NATIVE_EVENT in names and "aten::_local_scalar_dense" in names and "aten::_unique2" in names, names


# ── every metadata check, both kernels, the same message ───────────────────


def _interleaved(n: int = 16) -> torch.Tensor:
    return torch.zeros(n, 2, H, D)


def _alias_cases() -> dict[str, tuple[dict, str]]:
    """Aliasing inputs (dense spans and the exact, strided path) and what the error names."""
    k, v = torch.zeros(16, H, D), torch.zeros(16, H, D)
    other = torch.ones(3, H, D)
    slots = torch.arange(3)
    buf = torch.zeros(32, H, D)
    kv = _interleaved()
    rows = torch.zeros(34, H, D)
    cases = {
        "k_is_v": (dict(k_pool=k, v_pool=k, new_k=other, new_v=other, slot_mapping=slots), "k_pool and v_pool"),
        "pool_views_overlap": (
            dict(k_pool=buf[0:16], v_pool=buf[8:24], new_k=other, new_v=other, slot_mapping=slots),
            "k_pool and v_pool",
        ),
        "new_k_view_of_k": (dict(k_pool=k, v_pool=v, new_k=k[4:7], new_v=other, slot_mapping=slots), "new_k"),
        "new_v_view_of_v": (dict(k_pool=k, v_pool=v, new_k=other, new_v=v[4:7], slot_mapping=slots), "new_v"),
        "new_v_view_of_k": (dict(k_pool=k, v_pool=v, new_k=other, new_v=k[4:7], slot_mapping=slots), "new_v"),
        "slot_mapping_bytes_of_k": (
            dict(k_pool=k, v_pool=v, new_k=other, new_v=other, slot_mapping=k.view(-1).view(torch.long)[:3]),
            "slot_mapping",
        ),
        # strided, non-dense views of one (slots, 2, H, D) allocation: the exact element-address path
        "interleaved_new_k_in_k": (
            dict(k_pool=kv[:, 0], v_pool=kv[:, 1], new_k=kv[3:6, 0], new_v=other, slot_mapping=slots),
            "new_k overlaps k_pool",
        ),
        "interleaved_new_k_in_v": (
            dict(k_pool=kv[:, 0], v_pool=kv[:, 1], new_k=kv[3:6, 1], new_v=other, slot_mapping=slots),
            "new_k overlaps v_pool",
        ),
        # every other row of one buffer, shifted by two rows: K and V share 15 rows (strided, not dense)
        "strided_pools_overlap": (
            dict(k_pool=rows[0:32:2], v_pool=rows[2:34:2], new_k=other, new_v=other, slot_mapping=slots),
            "k_pool and v_pool",
        ),
    }
    return cases


ALL_REJECTIONS = {**BAD_WRITES, **{f"alias_{name}": case for name, case in _alias_cases().items()}}


def _fresh(case: str, table: dict) -> tuple[dict, str]:
    """The case's arguments, rebuilt so one kernel's run cannot leave anything for the other's."""
    if case.startswith("alias_"):
        return _alias_cases()[case.removeprefix("alias_")]
    override, match = table[case]
    return _args(**override), match


@needs_native
@pytest.mark.parametrize("case", list(ALL_REJECTIONS))
def test_both_kernels_reject_with_the_same_message_before_writing(case):
    messages = {}
    for name, write in KERNELS.items():
        args, match = _fresh(case, ALL_REJECTIONS)
        messages[name] = first_line(rejection(write, args, match))
    assert messages["native"] == messages["python"]


@needs_native
@pytest.mark.parametrize("case", list(BAD_SLOT_VALUES))
def test_both_kernels_reject_bad_slot_values_in_debug_mode(case, debug_checks):
    messages = {}
    for name, write in KERNELS.items():
        args, match = _fresh(case, BAD_SLOT_VALUES)
        messages[name] = first_line(rejection(write, args, match))
    assert messages["native"] == messages["python"]


@pytest.mark.parametrize(
    "case",
    ["slot_mapping_1d_with_batch", "new_k_heads_mismatch", "alias_new_k_view_of_k", "alias_interleaved_new_k_in_v"],
)
def test_unchecked_write_fails_the_rejection_check(case):
    """Negative control: the same check fails on a write without the kernels' checks."""
    args, match = _fresh(case, ALL_REJECTIONS)
    with pytest.raises(AssertionError):
        rejection(unchecked_write, args, match)


@needs_native
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_legal_layouts_are_written_not_refused(kernel):
    """Disjoint views of one allocation (K/V halves, interleaved K/V) are legal pools."""
    write = KERNELS[kernel]
    new, slots = torch.ones(2, H, D), torch.tensor([3, 9])
    halves = torch.zeros(2, 16, H, D)
    write(halves[0], halves[1], new, new * 2, slots)
    assert halves[0, [3, 9]].eq(1).all() and halves[1, [3, 9]].eq(2).all()
    kv = _interleaved()
    write(kv[:, 0], kv[:, 1], new, new * 2, slots)
    assert kv[[3, 9], 0].eq(1).all() and kv[[3, 9], 1].eq(2).all()
    assert kv[:, 0].sum() == 2 * H * D and kv[:, 1].sum() == 4 * H * D  # nothing else written
    buf = torch.zeros(32, H, D)
    write(buf[0:16], buf[16:32], new, new * 2, slots)  # adjacent, not overlapping
    assert buf[[3, 9]].eq(1).all() and buf[[19, 25]].eq(2).all()
    rows = torch.zeros(34, H, D)
    write(rows[0:32:2], rows[1:33:2], new, new * 2, slots)  # interleaved rows, disjoint
    assert rows[[6, 18]].eq(1).all() and rows[[7, 19]].eq(2).all()


@needs_native
def test_bad_slot_values_pass_unchecked_by_default_in_both_kernels():
    """By default no slot value is read (no sync): a duplicate slot is written, not refused."""
    assert not ar_paging.debug_checks_enabled()
    for write in KERNELS.values():
        args, _ = _fresh("slot_duplicate", BAD_SLOT_VALUES)
        write(*args.values())
        assert args["k_pool"][0].eq(1).all()


WIDE_TOKENS = 600  # x 2 heads x 4 x float32 = 19 KiB of chunk: over the C++ kernel's 16 KiB for 16-byte copies


@needs_native
@pytest.mark.parametrize(
    "layout", ["3d_tokens", "1d_batch1", "2d", "bf16", "non_contiguous_chunk", "misaligned_pool", "raw_bits"]
)
@pytest.mark.parametrize("tokens", [5, WIDE_TOKENS])
def test_native_matches_python_kernel(layout, tokens):
    """Bit for bit. Float32 rows of 2 x 4 in a chunk of 16 KiB or more are copied as 16-byte elements;
    bf16 rows (8 bytes), a pool 4 bytes off a 16-byte boundary and small chunks as they are; raw bits
    (NaN payloads included) survive either copy."""
    gen = torch.Generator().manual_seed(7)
    batch = 3 if layout == "2d" else 1
    num_slots = 2 * batch * tokens + 30
    dtype = torch.bfloat16 if layout == "bf16" else torch.float32
    new_k = torch.randn(batch, tokens, H, D, generator=gen).to(dtype)
    new_v = torch.randn(batch, tokens, H, D, generator=gen).to(dtype)
    slots = torch.randperm(num_slots, generator=gen)[: batch * tokens].reshape(batch, tokens)
    if layout in ("3d_tokens", "bf16", "non_contiguous_chunk", "misaligned_pool", "raw_bits"):
        slots, new_k, new_v = slots[0], new_k[0], new_v[0]
    elif layout == "1d_batch1":
        slots = slots[0]
    if layout == "non_contiguous_chunk":
        new_k = torch.randn(H, tokens, D, generator=gen).transpose(0, 1)
        assert not new_k.is_contiguous()
    if layout == "raw_bits":
        raw = torch.randint(-(2**31), 2**31 - 1, (tokens, H, D), generator=gen, dtype=torch.int32)
        raw[0, 0, :2] = torch.tensor([0x7FA00001, 0xFFC12345 - 2**32])  # a signalling NaN, a NaN with a payload
        new_k = raw.view(torch.float32)
        assert new_k.isnan().any()
    pools = tuple(torch.randn(num_slots, H, D, generator=gen).to(dtype) for _ in range(2))

    def fresh(pool: torch.Tensor) -> torch.Tensor:
        if layout != "misaligned_pool":
            return pool.clone()
        buf = torch.zeros(pool.numel() + 1, dtype=pool.dtype)
        view = buf[1:].view(pool.shape)  # storage offset 4 bytes
        view.copy_(pool)
        return view

    results = {}
    for name, write in KERNELS.items():
        k, v = fresh(pools[0]), fresh(pools[1])
        write(k, v, new_k, new_v, slots)
        results[name] = (k, v)
    bits = torch.int16 if dtype == torch.bfloat16 else torch.int32
    for i in (0, 1):
        assert torch.equal(results["native"][i].view(bits), results["python"][i].view(bits))
    assert not torch.equal(results["native"][0], pools[0])  # the write happened


# ── compiled == eager, through the native kernel ────────────────────────────


def commit_step(k_pools, v_pools, x, window, slots):
    """Two layers: read the window, mix it into the chunk, commit the chunk into each layer's pools."""
    out = x.new_zeros(())
    for k, v in zip(k_pools, v_pools):
        kw, vw = ar_paging.gather_window(k, v, window)
        new_k, new_v = x * 2 + vw.mean(0), x + kw.mean(0)
        torch.ops.ar_paging.paged_write(k, v, new_k, new_v, slots)
        out = out + kw.sum() + vw.sum()
        x = new_k
    return out


@pytest.mark.compile
@needs_native
@pytest.mark.parametrize("lowered", [False, True], ids=["lowering-off", "lowering-on"])
def test_compiled_step_equals_eager_with_the_native_kernel(lowered, monkeypatch):
    """Lowering off: the compiled code calls the C++ kernel once a layer. On (the default, see
    ``ar_paging.lowering``): Inductor's scatter writes the pools and the kernel is never called."""
    monkeypatch.setattr(ar_paging.lowering, "_enabled", lowered)
    gen = torch.Generator().manual_seed(3)
    layers, slots_n = 2, 64
    pools = [
        (torch.randn(slots_n, H, D, generator=gen), torch.randn(slots_n, H, D, generator=gen)) for _ in range(layers)
    ]
    x = torch.randn(8, H, D, generator=gen)
    window, slots = torch.arange(0, 16), torch.arange(40, 48)

    def clones():
        return [p[0].clone() for p in pools], [p[1].clone() for p in pools]

    torch._dynamo.reset()
    compiled = torch.compile(commit_step, fullgraph=True, dynamic=False)
    eager_k, eager_v = clones()
    want = commit_step(eager_k, eager_v, x, window, slots)
    comp_k, comp_v = clones()
    names = profiled_names(lambda: compiled(comp_k, comp_v, x, window, slots))
    assert names.count(NATIVE_EVENT) == (0 if lowered else layers), names  # the C++ kernel, once a layer
    got = compiled(*clones(), x, window, slots)
    torch.testing.assert_close(got, want)
    for a, b, before in zip(comp_k + comp_v, eager_k + eager_v, [p[0] for p in pools] + [p[1] for p in pools]):
        torch.testing.assert_close(a, b)
        assert not torch.equal(a, before)  # the comparison is not vacuous: the step wrote the pools


# ── the source ships with the package (the JIT build needs it in a wheel install) ──


def shipped_package_data(pyproject_text: str, package: str, relative: str) -> bool:
    """``relative`` (a path inside ``package``) matches one of pyproject's setuptools package-data globs."""
    import fnmatch
    import tomllib

    globs = tomllib.loads(pyproject_text).get("tool", {}).get("setuptools", {}).get("package-data", {})
    return any(fnmatch.fnmatch(relative, pattern) for pattern in globs.get(package, []))


def test_kernel_source_is_package_data():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    source = ar_paging.native.SOURCE.relative_to(root / "ar_paging").as_posix()
    assert shipped_package_data((root / "pyproject.toml").read_text(), "ar_paging", source)
    # negative control: the metadata before the native kernel shipped only .py files
    assert not shipped_package_data('[tool.setuptools.packages.find]\ninclude = ["ar_paging*"]\n', "ar_paging", source)


def index_copy_shapes(dtype: torch.dtype, tokens: int) -> list[list[int]]:
    """The ``self`` shapes the profiler records for the native kernel's index_copy_ calls."""
    k, v = torch.zeros(2 * tokens, H, D, dtype=dtype), torch.zeros(2 * tokens, H, D, dtype=dtype)
    new, slots = torch.ones(tokens, H, D, dtype=dtype), torch.arange(1, 2 * tokens, 2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.ops.ar_paging.paged_write(k, v, new, new, slots)
    assert k[slots].eq(1).all() and v[slots].eq(1).all() and k[slots - 1].eq(0).all()
    return [list(e.input_shapes[0]) for e in prof.events() if e.name == "aten::index_copy_"]


@needs_native
def test_native_copies_large_float32_chunks_as_16_byte_elements():
    assert index_copy_shapes(torch.float32, WIDE_TOKENS) == [[2 * WIDE_TOKENS, H, D * 4 // 16]] * 2
    # controls: bf16 rows of 4 (8 bytes) cannot be viewed as 16-byte elements; a 5-token chunk is not worth it
    assert index_copy_shapes(torch.bfloat16, WIDE_TOKENS) == [[2 * WIDE_TOKENS, H, D]] * 2
    assert index_copy_shapes(torch.float32, 5) == [[10, H, D]] * 2
