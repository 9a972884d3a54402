"""The broker process (``node/``): in-process services and a real node process per test or
module."""
