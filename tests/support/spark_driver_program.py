"""The driver program the Spark standalone tests submit (``spark-submit ... this file
host:port``): one application, whose executors start once, runs the steps the test sends
on its control connection (a JSON line per step, a JSON line back) and ends when the test
closes it.

It imports only ferrymq and pyspark: the classes defined here reach the executors by value
(cloudpickle pickles ``__main__``'s classes that way), so the executors need nothing but
the installed ferrymq, as an operator's cluster would.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback

from ferrymq.spark import build_session
from ferrymq.spark.options import write_options
from ferrymq.spark.sink import StreamWriter
from ferrymq.spark.source import FerryDataSource

TOKEN_ENV = "FERRYMQ_TEST_DRIVER_TOKEN"
STALL_LIMIT_S = 120  # a stalled task that was never killed fails after this, loudly


# ---- a sink that stalls once, for the kill test ----------------------------------------
class StallOnceSink(FerryDataSource):
    """The ferrymq sink, except that the first attempt of partition 0 in batch 0 stops
    after ``stallAfterChunks`` stored chunks: it writes the ``stallSignal`` file (its pid
    and the message ids it stored) and blocks until its executor is killed. The rerun of
    that task (attempt 1, on another executor) is the plain sink."""

    @classmethod
    def name(cls) -> str:
        return "ferrymq_stall_once"

    def streamWriter(self, schema, overwrite: bool):
        return StallOnceWriter(
            write_options(self.options),
            schema,
            self.options["stallSignal"],
            int(self.options["stallAfterChunks"]),
        )


class StallOnceWriter(StreamWriter):
    def __init__(self, options, schema, signal_path: str, after_chunks: int) -> None:
        super().__init__(options, schema)
        self.signal_path = signal_path
        self.after_chunks = after_chunks

    def write(self, iterator):
        from pyspark import TaskContext

        from ferrymq.spark import sink

        context = TaskContext.get()
        if (
            context.partitionId(),
            context.attemptNumber(),
            context.getLocalProperty("streaming.sql.batchId"),
        ) != (0, 0, "0"):
            return super().write(iterator)
        plain, signal_path, after_chunks = sink.Sender, self.signal_path, self.after_chunks

        class StallingSender(plain):
            stored: list[str] = []  # this task's, in this process only
            chunks = 0

            def send(self, chunk, idempotent: bool) -> None:
                super().send(chunk, idempotent)
                StallingSender.stored += [m.message_id for m in chunk]
                StallingSender.chunks += 1
                if StallingSender.chunks == after_chunks:
                    _stall(signal_path, StallingSender.stored)

        sink.Sender = StallingSender  # write_rows looks the class up when it runs
        try:
            return super().write(iterator)
        finally:
            sink.Sender = plain


def _stall(signal_path: str, stored: list[str]) -> None:
    staged = signal_path + ".tmp"
    with open(staged, "w") as f:
        json.dump({"pid": os.getpid(), "stored": stored}, f)
    os.rename(staged, signal_path)  # the test never reads half a file
    time.sleep(STALL_LIMIT_S)
    raise RuntimeError(f"stalled {STALL_LIMIT_S} s and the test never killed this executor")


# ---- steps -----------------------------------------------------------------------------
def read_topic(spark, endpoints: str, topic: str) -> dict:
    """Every row of ``topic`` with the Spark partition and the executor process that read
    it (a Python worker's working directory is its executor's directory on its worker)."""

    def tag(partition: int, rows):
        where, pid = os.getcwd(), os.getpid()
        for row in rows:
            yield [
                partition,
                row.queue_id,
                row.queue_offset,
                row.message_id,
                row.body.decode(),
                where,
                pid,
            ]

    frame = (
        spark.read.format("ferrymq")
        .option("endpoints", endpoints)
        .option("subscribe", topic)
        .load()
    )
    return {
        "partitions": frame.rdd.getNumPartitions(),
        "rows": frame.rdd.mapPartitionsWithIndex(tag).collect(),
    }


def run_job(spark, name: str, argv: list[str]) -> int:
    """A pipeline of ferrymq/spark/jobs/ on this application, as its module's ``__main__``
    runs it under spark-submit (``submit_main``), minus the session it would build."""
    from ferrymq.spark.jobs import run_job as run

    return run(name, argv, master=None, spark=spark)


def copy_topic(
    spark, endpoints: str, source: str, target: str, sink_id: str, batch_id: int
) -> None:
    """An idempotent batch write (``sinkId`` + ``batchId``, as ``foreachBatch`` code
    does) of ``source``'s rows into ``target``."""
    (
        spark.read.format("ferrymq")
        .option("endpoints", endpoints)
        .option("subscribe", source)
        .load()
        .select("body", "keys", "tag", "properties")
        .write.format("ferrymq")
        .option("endpoints", endpoints)
        .option("topic", target)
        .option("sinkId", sink_id)
        .option("batchId", str(batch_id))
        .option("chunkMessages", "4")
        .mode("append")
        .save()
    )


def stream_with_a_stall(
    spark,
    endpoints: str,
    source: str,
    target: str,
    checkpoint: str,
    signal_path: str,
    stall_after_chunks: int,
    timeout_s: float,
) -> dict:
    """``source`` -> ``target`` through the streaming sink (AvailableNow), with
    ``StallOnceSink``'s stall in it; returns once the query has ended."""
    spark.dataSource.register(StallOnceSink)
    query = (
        spark.readStream.format("ferrymq")
        .option("endpoints", endpoints)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .select("body", "keys", "tag", "properties")
        .writeStream.format(StallOnceSink.name())
        .option("endpoints", endpoints)
        .option("topic", target)
        .option("chunkMessages", "4")
        .option("stallSignal", signal_path)
        .option("stallAfterChunks", str(stall_after_chunks))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    ended = query.awaitTermination(timeout_s)
    if not ended:
        query.stop()
    tracker = spark.sparkContext.statusTracker()
    stages = [
        tracker.getStageInfo(stage)
        for job in tracker.getJobIdsForGroup(str(query.runId))
        for stage in (tracker.getJobInfo(job).stageIds if tracker.getJobInfo(job) else [])
    ]
    error = query.exception()
    return {
        "ended": ended,
        "error": str(error) if error else None,
        "batches": [(p["batchId"], p["numInputRows"]) for p in query.recentProgress],
        "failed_tasks": sum(s.numFailedTasks for s in stages if s is not None),
    }


STEPS = {
    "read_topic": read_topic,
    "run_job": run_job,
    "copy_topic": copy_topic,
    "stream_with_a_stall": stream_with_a_stall,
}


def main(control_address: str) -> int:
    spark = build_session(None, "ferrymq-standalone-tests")  # the master spark-submit gave
    host, port = control_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as control:
        control.settimeout(None)  # a step runs as long as the test lets it
        lines = control.makefile("rwb")

        def say(answer: dict) -> None:
            lines.write(json.dumps(answer).encode() + b"\n")
            lines.flush()

        say(
            {
                "token": os.environ[TOKEN_ENV],
                "app_id": spark.sparkContext.applicationId,
                "pid": os.getpid(),
            }
        )
        for line in lines:  # until the test closes the connection
            command = json.loads(line)
            try:
                say({"result": STEPS[command["step"]](spark, **command["args"])})
            except Exception:
                say({"error": traceback.format_exc()})
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
