"""ferrymq on Spark: the ``ferrymq`` PySpark data source (batch and streaming reads and
writes) and the pipelines in ``jobs/``. Needs the ``spark`` extra and Java 17+.

    from ferrymq.spark import build_session
    spark = build_session()                 # local[2], format "ferrymq" registered
    spark.read.format("ferrymq").option("endpoints", "127.0.0.1:8081")
         .option("subscribe", "orders").load()
"""

from ferrymq.spark.session import JavaMissing, build_session, register, require_java

__all__ = ["JavaMissing", "build_session", "register", "require_java"]
