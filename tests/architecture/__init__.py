"""The repository's own rules: the layer table (test_layers.py), and the suite's refusal to
start on a full disk."""
