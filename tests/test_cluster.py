"""A real standalone cluster (master and worker from the pip-installed Spark, on loopback):
CALL runs its tasks on executors, and an executor killed mid-task is replaced and the task
retried, the job completing."""
import os
import shutil
import socket
import subprocess
import sys
import time

import lance
import pytest

from conftest import ROOT
from degraded_table import content, degraded_table


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import pyspark
    spark_home = os.path.dirname(pyspark.__file__)
    env = {**os.environ, "SPARK_HOME": spark_home, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable}
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    logs = tmp_path_factory.mktemp("cluster")
    cls = os.path.join(spark_home, "bin", "spark-class")
    master = subprocess.Popen(
        [cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(free_port())], env=env, stdout=open(logs / "master.log", "w"),
        stderr=subprocess.STDOUT)
    time.sleep(4)
    worker = subprocess.Popen(
        [cls, "org.apache.spark.deploy.worker.Worker", url, "--cores", "2", "--memory", "2g",
         "--host", "127.0.0.1", "--webui-port", str(free_port()), "--work-dir", str(logs / "work")],
        env=env, stdout=open(logs / "worker.log", "w"), stderr=subprocess.STDOUT)
    yield url, logs / "work"
    for p in (worker, master):
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


@pytest.fixture(scope="module")
def spark(cluster, warehouse):
    url, _ = cluster
    from pyspark.sql import SparkSession
    from lance_compact import configure_spark_with_lance_compact

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master(url).appName("lance-compact-cluster-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.executor.memory", "1g")
               .config("spark.task.maxFailures", "3"))
    session = configure_spark_with_lance_compact(builder, warehouse=str(warehouse)).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    deadline = time.time() + 60  # wait for the executor to register
    while not session.sparkContext._jsc.sc().getExecutorMemoryStatus().size() > 1:
        assert time.time() < deadline, "no executor registered with the standalone master"
        time.sleep(0.5)
    yield session
    session.stop()


def test_call_on_a_cluster_and_an_executor_killed_mid_task(spark, warehouse, cluster):
    path = warehouse / "db" / "clustered.lance"
    shutil.rmtree(path, ignore_errors=True)
    degraded_table(str(path), fragments=60, rows_per_fragment=40)
    before = lance.dataset(str(path))
    r = spark.sql("CALL lance.compact(table => 'db.clustered', target_rows_per_fragment => 300, "
                  "options => map('test_fail_task', '0:0:kill_executor'))").collect()[0]
    after = lance.dataset(str(path))
    assert r.tasks >= 2 and r.tasks_failed == 0 and r.commits == 1
    assert content(after) == content(before)
    # the killed executor was replaced (the worker started a second one), and the next CALL runs
    executors = [d for app in (cluster[1]).iterdir() for d in app.iterdir() if d.is_dir()]
    assert len(executors) >= 2, executors
    assert spark.sql("CALL lance.compact(table => 'db.clustered')").collect()[0].read_version == after.version
