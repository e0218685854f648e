"""Finding copies: the instrumented backend (probe), Inductor hooks, pool attribution, findings.

Nothing here imports :mod:`compile_checks.explain`, :mod:`compile_checks.gate` or the reports
(an ``import-linter`` contract in pyproject.toml holds it).
"""
