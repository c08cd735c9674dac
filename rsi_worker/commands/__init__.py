"""The ``rsi`` command's modules, one per audience; :mod:`rsi_worker.cli` assembles them."""
