"""Audit a production compile without re-running it: ``compile-checks scan PATH...``.

A GPU job already leaves what Inductor compiled: ``TORCH_TRACE`` structured logs (what tlparse
reads), ``TORCH_COMPILE_DEBUG`` folders, depyf / vLLM dumps. The scan reads each compile's
post-grad graph as logged (after reinplacing and ``decompose_auto_functionalized``), rebuilds it
as an ``fx.Graph`` and runs the live check's own copy finders on it
(:func:`compile_checks.check.graph.copies.find_copy_sites`): the verdict comes from the logged
graph, confirmed against the logged output code.

* :mod:`.artifacts`: one compiled graph's logged texts, and the scan's errors;
* :mod:`.trace` / :mod:`.folders`: reading ``TORCH_TRACE`` logs, debug and depyf folders;
* :mod:`.fx_text`: a ``print_readable`` graph back into an ``fx.Graph``;
* :mod:`.inputs`: which caller tensor each graph input is (sources, shared storage, ``--pools``);
* :mod:`.copies`: the surviving copies of one graph, each explained;
* :mod:`.replay`: the gate's explanation of a copy, from Inductor's reinplace rules replayed on AOT's graph;
* :mod:`.cache_origin`: whether a compile cache served the graph, and for which input aliasing (a mismatch
  is a ``cache_aliasing`` finding);
* :mod:`.warm_run`: one case run against a warm Inductor cache, traced and scanned (``gate --inductor-cache``);
* :mod:`.call_sizes`: a symbolic graph's byte counts at the sizes its calls had;
* :mod:`.config` / :mod:`.command`: expectations, and the command (table, JSON, JUnit, exit code).
"""
