"""Fault injection for ``rsi loadtest --chaos`` (docs/operations/chaos.md): faults against an embedded
cluster of real processes (:mod:`rsi_worker.chaos.faults`) and the fault report read back from the
durable state and Redis (:mod:`rsi_worker.chaos.report`)."""
