"""One record for everything the check can say (:class:`Finding`), and the finders that produce it.

Every output (the gate's table, ``--json``, JUnit, the pytest plugin, ``dump``'s index, the traffic
report, ``repro`` and ``scan``) renders a list of :class:`Finding` and the :class:`Verdict` computed
from it once; none computes a story of its own.
"""

from compile_checks.findings.record import Finding, Verdict
from compile_checks.findings.registry import Finder, finders, register_finder

__all__ = ["Finder", "Finding", "Verdict", "finders", "register_finder"]
