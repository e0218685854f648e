"""The gate: plan, run (through :func:`compile_checks.case.run_case`), config, targets, outputs
(table / JSON / JUnit) and the pytest plugin. Torch-free at import (the plugin loads in every
pytest run)."""
