"""The test workers' garbage collector: the import-time heap frozen, young generations larger.

Why: a worker holds ~670k objects once torch, vLLM, the checker and the collected tests are imported,
and every full collection walked all of them: 25-28 of them per worker over a suite run, 0.3-0.4 s
each (with generations 0 and 1, 9-14 s of GC per worker). ``gc.freeze()`` after collection moves
that heap out of every later collection (it lives to the end anyway), and larger thresholds collect
the young generations less often. Garbage is still collected: only when, not whether, changes; a
test that needs a collection at a point calls ``gc.collect()`` itself. Peak RSS stays ~1.0-1.1 GB a
worker. ``TESTS_GC_TUNE=0`` keeps Python's defaults.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping

GC_ENV = "TESTS_GC_TUNE"  # "0": Python's defaults
THRESHOLDS = (20_000, 20, 50)  # Python's defaults: (700, 10, 10)


def tune_gc(environ: Mapping[str, str] = os.environ) -> bool:
    """Freeze the heap as it is now (after one full collection) and raise the thresholds; False when
    switched off (nothing changed)."""
    if environ.get(GC_ENV) == "0":
        return False
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    return True
