"""The ``ferrymq`` command (``ferrymq.cli``) and the launcher it starts clusters with
(``ferrymq.launcher``, ports held until bound)."""
