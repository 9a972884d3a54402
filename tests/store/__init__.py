"""The storage engine (``store/``): layer by layer, bad input, faults, power loss,
retention, the model test, and its C loops."""
