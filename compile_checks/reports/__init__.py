"""The traffic report: what surviving pool copies cost, next to the ideal, per case.

Ships with the package as ``compile_checks.reports`` (never as a top-level ``reports``
package, which could shadow a module of the same name in the user's project). Run it
as ``compile-checks report ...`` (its options and exit codes are in :mod:`compile_checks.cli`).
Modules: ``command`` (the subcommand), ``planning`` (each case under each pipeline), ``tables`` (running
them into tables), ``run`` (each case through ``run_case``), ``traffic`` (rows),
``accounting`` (extra bytes node by node), ``ideal`` (ideal bytes from the graph),
``measure`` (ms per step), ``builtin`` (the default scenario set), ``baseline``, ``plot``, ``html_page``,
``outputs``; ``frame`` (:func:`~compile_checks.reports.frame.traffic_frame`: the table as a pandas DataFrame).
"""
