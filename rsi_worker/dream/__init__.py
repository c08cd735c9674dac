"""The Dream-RSI exploration-policy cycle, ``rsi dream`` (docs/dream/README.md).

Tree worlds (:mod:`.tree`), simulated search tasks (:mod:`.simtasks`), deterministic replay
(:mod:`.replay`, :mod:`.view`), policies (:mod:`.policies`), the sandbox (:mod:`.sandbox`), the
evaluator and sweep (:mod:`.evaluate`) and the cycle (:mod:`.cycle`).
"""
