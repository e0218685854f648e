"""Repo-only, not installed: the committed baseline (baseline.json), results/, and the benchmarks.

The report itself is :mod:`compile_checks.reports` (``compile-checks report``); ``python -m reports``
is a one-line entry to it. ``python -m reports.bench`` / ``python -m reports.bench_hotpath`` time a
compiled commit step and the hot path.
"""
