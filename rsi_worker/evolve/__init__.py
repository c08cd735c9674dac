"""Offline RRSI evolve on task suites (docs/algorithm/evolve.md): suites, the evolve engine, exports."""
