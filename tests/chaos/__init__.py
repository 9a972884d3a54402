"""The chaos suite (``chaos/``): its checker, nemesis and network, and short runs against
real clusters."""
