# Sourced by the bin/ scripts: the project's venv, its Spark and the catalog jar.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${LANCE_COMPACT_VENV:-$root/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "no project venv at $venv: run bin/setup first" >&2
  exit 1
fi
export SPARK_HOME="$("$venv/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
# Drivers and executors run this Python (and so the same pylance).
export PYSPARK_PYTHON="$venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$venv/bin/python"
export PATH="$venv/bin:$PATH"
# Local mode talks to itself only.
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
jar="${LANCE_COMPACT_JAR:-$root/spark-ext/target/lance-spark-compact.jar}"
if [ ! -f "$jar" ]; then
  echo "no catalog jar at $jar: run bin/setup (or bin/sbt package) first" >&2
  exit 1
fi
# The jar lance-spark-sql and configure_spark_with_lance_compact use (the source build).
export LANCE_COMPACT_JAR="$jar"
catalog_class="io.github.lancecompact.spark.catalog.LanceCatalog"
plugin_class="io.github.lancecompact.spark.engine.EnginePlugin"
