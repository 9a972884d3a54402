"""A SparkSession with the ferrymq format registered, after checking Java.

Spark 4 runs on Java 17 or newer; an older or missing ``java`` otherwise fails deep inside
the JVM launcher with a message that names neither. ``require_java`` says it plainly.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

MIN_JAVA = 17


class JavaMissing(RuntimeError):
    pass


def java_major_version() -> tuple[int, str]:
    """(major version, the java binary) of the JVM Spark will start."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise JavaMissing(
            f"ferrymq's Spark source needs Java {MIN_JAVA} or newer, and no java was found "
            "(JAVA_HOME unset and none on PATH): install a JDK 17+ (e.g. openjdk-17-jdk-headless) "
            "and put it on PATH or set JAVA_HOME"
        )
    try:
        shown = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired) as error:
        raise JavaMissing(f"cannot run {java} -version: {error}") from None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', shown)
    if not found:
        raise JavaMissing(f"cannot tell the version of {java}: {shown.strip()[:200]}")
    major = int(found.group(1))
    if major == 1 and found.group(2):  # "1.8.0_..." is Java 8
        major = int(found.group(2))
    return major, java


def require_java() -> None:
    major, java = java_major_version()
    if major < MIN_JAVA:
        raise JavaMissing(
            f"ferrymq's Spark source needs Java {MIN_JAVA} or newer; {java} is Java {major}: "
            "install a JDK 17+ and set JAVA_HOME to it"
        )


def register(spark) -> None:
    """Make ``format("ferrymq")`` available in ``spark``."""
    from ferrymq.spark.source import FerryDataSource

    spark.dataSource.register(FerryDataSource)


def build_session(master: str | None = None, app_name: str = "ferrymq", **config):
    """A SparkSession (on ``master``, or the one spark-submit was given) with the
    ferrymq format registered. Python workers use this interpreter, so they import the
    same ferrymq and pyarrow."""
    require_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:  # under spark-submit, None keeps the master it was given
        builder = builder.master(master)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
    }
    for key, value in {**defaults, **config}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
