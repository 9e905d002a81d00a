package io.github.lancecompact.spark.engine

import org.apache.spark.{JobExecutionStatus, SparkContext}
import org.apache.spark.internal.Logging

/** A quiet exit while the pool's first worker still starts the executors' Python workers (its
 * job `lance_compact-start-workers`, compaction/spark_job.py's start_workers): a short
 * `lance-spark-sql -e` ended while that job ran, and in the stop of the context its executor's
 * heartbeat met a stopped block manager and printed ERROR traces (results unaffected). At the
 * JVM's exit, before Spark's own shutdown hooks (which stop the context), this waits for the job
 * to end (a Python import: about a second), and cancels it if it has not within 5 s. */
private[engine] object StartJobAtExit extends Logging {
  /** The job group start_workers runs its job in (the same literal there). */
  val Group = "lance_compact-start-workers"
  /** Hadoop's shutdown hooks run highest first; Spark's all run inside one at priority 40
   * (FileSystem's 10 + 30), where the SparkContext is stopped. */
  private val Priority = 50
  private val WaitMs = 5000L
  @volatile private var context: Option[SparkContext] = None

  private lazy val installed: Unit =
    org.apache.hadoop.util.ShutdownHookManager.get().addShutdownHook(() => awaitOrCancel(), Priority)

  /** Watch `sc`'s start job at exit (the pool's context: one per JVM at a time). */
  def install(sc: SparkContext): Unit = {
    context = Some(sc)
    try installed catch { case e: Exception => logDebug("no shutdown hook for the start job", e) }
  }

  private def running(sc: SparkContext): Boolean = {
    val tracker = sc.statusTracker
    tracker.getJobIdsForGroup(Group).exists(id => tracker.getJobInfo(id).exists(j =>
      j.status == JobExecutionStatus.RUNNING || j.status == JobExecutionStatus.UNKNOWN))
  }

  private def awaitUntil(sc: SparkContext, deadline: Long): Boolean = {
    while (running(sc) && System.nanoTime() < deadline) Thread.sleep(50)
    !running(sc)
  }

  private def awaitOrCancel(): Unit = context.filterNot(_.isStopped).foreach { sc =>
    try {
      if (!awaitUntil(sc, System.nanoTime() + WaitMs * 1000000L)) {
        sc.cancelJobGroup(Group)
        awaitUntil(sc, System.nanoTime() + WaitMs * 1000000L)
      }
    } catch { case e: Exception => logDebug("awaiting the start job at exit", e) }
  }
}
