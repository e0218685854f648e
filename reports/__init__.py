"""Repo-only alias of :mod:`compile_checks.reports` (the report ships inside the package).

``python -m reports ...`` (CI) and ``python -m reports.bench`` keep working in this
repository; ``reports.cli`` / ``reports.traffic`` / ``reports.baseline`` / ``reports.plot``
are the very modules of ``compile_checks.reports``. Not installed: see pyproject.
"""
