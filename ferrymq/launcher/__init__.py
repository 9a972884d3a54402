"""Local clusters of node processes (``cluster.py``) and waiting on them with a deadline
(``polling.py``), for the CLI, the chaos suite, the benchmarks and the tests. It starts
nodes as processes and shares only ``node.port_holds`` with them."""
