"""Pipelines on the ferrymq data source. Each job is a module with ``build_parser()`` and
``run(spark, args)``; ``ferrymq spark run <job> ...`` runs one on a local session, and
``spark-submit ferrymq/spark/jobs/<module>.py ...`` on any cluster (the module's
``__main__`` uses the master spark-submit was given).

- ``tag-minute-aggregates`` (streaming): JSON events -> count and sum per tag per minute,
  to Parquet and to a topic;
- ``export-parquet`` (batch): a topic's offset range -> Parquet;
- ``replay-parquet`` (batch): Parquet -> a topic.
"""

from __future__ import annotations

import importlib

JOBS = {
    "tag-minute-aggregates": "ferrymq.spark.jobs.tag_minute_aggregates",
    "export-parquet": "ferrymq.spark.jobs.export_parquet",
    "replay-parquet": "ferrymq.spark.jobs.replay_parquet",
}


def job_module(name: str):
    if name not in JOBS:
        raise ValueError(f"unknown Spark job {name!r}; jobs: {', '.join(sorted(JOBS))}")
    return importlib.import_module(JOBS[name])


def run_job(name: str, argv: list[str], master: str | None = "local[2]", spark=None) -> int:
    """Parse ``argv`` for job ``name`` and run it on ``spark`` (or a new session)."""
    module = job_module(name)
    args = module.build_parser().parse_args(argv)
    if spark is None:
        from ferrymq.spark.session import build_session

        spark = build_session(master, f"ferrymq-{name}")
    return module.run(spark, args)


def submit_main(name: str, argv: list[str]) -> int:
    """``__main__`` of a job module under spark-submit: the master comes from it."""
    return run_job(name, argv, master=None)
