"""The ``ferrymq`` command line (``main.py``): administration, produce and consume,
a local cluster, rollback listings, Spark jobs, chaos runs; ``ferrymq node`` runs
``node.run``. It may import every other package, the node's lazily (only to run one)."""
