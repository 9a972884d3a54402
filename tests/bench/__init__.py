"""The benchmarks (``bench/``) run end to end in their smoke sizes, and their reports."""
