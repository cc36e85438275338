"""The JVM segment reader's jar (``node/spark/java``): compiled on first use with
``javac`` against the jars PySpark ships, cached by the hash of its sources.

Rules:
- The jar's name carries the hash of the Java sources and of PySpark's version, so a
  changed source (or another Spark) builds a new jar; an unchanged one is reused.
- The cache is ``$MINIKAFKA_CACHE/spark-jvm`` if set, else ``.cache/spark-jvm`` of the
  checkout (``~/.cache/minikafka/spark-jvm`` when installed).
- A build goes to a private temporary directory and is renamed into place, so
  concurrent first uses (parallel tests) never see half a jar.
- No ``javac``, or a failed compile: ``JarUnavailable`` with the reason; callers fall
  back to the Python source (``node.spark.segments``).
- A SparkSession gets the jar only when it is created: ``configure(builder)``.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from node.paths import CODE_ROOT, installed

SOURCES = Path(__file__).resolve().parent / "java"
SOURCE_CLASS = "minikafka.spark.SegmentSource"
JAVA_RELEASE = "17"
BUILD_TIMEOUT_S = 300


class JarUnavailable(RuntimeError):
    """The jar cannot be built here (no javac, or the compile failed): why."""


def cache_dir() -> Path:
    if os.environ.get("MINIKAFKA_CACHE"):
        return Path(os.environ["MINIKAFKA_CACHE"]) / "spark-jvm"
    if installed():
        return Path.home() / ".cache" / "minikafka" / "spark-jvm"
    return CODE_ROOT / ".cache" / "spark-jvm"


def spark_jars() -> Path:
    import pyspark
    return Path(pyspark.__file__).resolve().parent / "jars"


def java_sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def source_hash() -> str:
    import pyspark
    digest = hashlib.sha256(f"spark {pyspark.__version__} java {JAVA_RELEASE}\n".encode())
    for path in java_sources():
        digest.update(str(path.relative_to(SOURCES)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def jar_path(cache: Path | None = None) -> Path:
    """The jar, built first if the cache has none for these sources."""
    cache = cache or cache_dir()
    target = cache / f"minikafka-spark-{source_hash()}.jar"
    if target.is_file():
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise JarUnavailable("no javac on PATH: the JVM segment reader cannot be built "
                             "(install a JDK 17+)")
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=cache))
    try:
        classes = work / "classes"
        command = [javac, "--release", JAVA_RELEASE, "-nowarn", "-d", str(classes),
                   "-cp", str(spark_jars() / "*"), *map(str, java_sources())]
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise JarUnavailable(f"javac took over {BUILD_TIMEOUT_S} s") from None
        if done.returncode != 0:
            raise JarUnavailable(f"javac failed ({done.returncode}): "
                                 f"{(done.stderr or done.stdout)[-2000:]}")
        built = work / target.name
        with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        os.replace(built, target)
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)


def configure(builder, cache: Path | None = None):
    """``builder`` (a SparkSession.Builder) with the jar on the driver's and the
    executors' class path; JarUnavailable if it cannot be built."""
    jar = str(jar_path(cache))
    return (builder.config("spark.jars", jar)
            .config("spark.driver.extraClassPath", jar)
            .config("spark.executor.extraClassPath", jar))
