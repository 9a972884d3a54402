"""Local clusters of node processes (``cluster.py``), single nodes started from code
(``node_process.py``) and waiting on them with a deadline (``polling.py``), for the CLI,
the chaos suite, the benchmarks, the monitoring stack and the tests. It starts nodes as
processes and shares only ``node.port_holds`` with them."""
