"""The chaos suite (issue 6): a workload records every operation, a nemesis injects faults,
a checker judges the history against what docs/guarantees.md promises per mode."""
