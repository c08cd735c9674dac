"""Running rsi-worker on this machine, without a deployment.

* :mod:`~rsi_worker.local.embedded` — the one-command local mode (``rsi demo``, ``--embedded``): a
  private Redis and real worker processes, or everything in one process;
* :mod:`~rsi_worker.local.servers` — private ``redis-server`` and PostgreSQL processes (embedded mode
  and the test suite);
* :mod:`~rsi_worker.local.supervise` — keeps a worker process running (``rsi worker``).
"""
