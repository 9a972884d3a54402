"""The Spark data source, sink and jobs (``ferrymq.spark``) on local Spark against real
nodes."""
