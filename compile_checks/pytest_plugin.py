"""pytest plugin (placeholder until compile_checks lands)."""
