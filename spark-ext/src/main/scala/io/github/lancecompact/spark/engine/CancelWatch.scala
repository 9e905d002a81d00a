package io.github.lancecompact.spark.engine

import java.util.concurrent.ConcurrentHashMap

import scala.util.control.NonFatal

import org.apache.spark.SparkContext
import org.apache.spark.internal.Logging
import org.apache.spark.scheduler.{JobFailed, LanceCompactCancelEvents, SparkListener, SparkListenerJobEnd, SparkListenerJobStart}
import org.apache.spark.scheduler.LanceCompactCancelEvents.Cancel

/** Makes every form of cancel reach a statement, even one sent while no Spark job of it runs,
 * with no job, task or executor slot of its own.
 *
 * Spark's plain `cancelJobGroup`, `cancelJobsWithTag` and `cancelAllJobs` (and what calls them:
 * `SparkSession.interruptAll`/`interruptTag`, spark-sql's Ctrl-C) cancel ACTIVE jobs only, and post
 * no listener event at all when none is active (DAGScheduler.handleJobGroupCancelled just logs
 * "Cannot find active jobs"). A statement spends much of its time on the driver (planning,
 * commits, index optimization, cleanup) with no job running, so such a cancel would be lost.
 * Each of them is posted to the DAGScheduler's event loop all the same: [[LanceCompactCancelEvents]]
 * shows them to this watch as they are posted (and passes them on to Spark unchanged), and a
 * cancel of a watched statement's job group, of one of its tags (its caller's, its session's, its
 * request's own) or of all jobs marks it cancelled (`onCancel`): the engine stops at its next check.
 * A cancel of a real job of the statement in any form (also the UI's kill of the job or its
 * stage) fails that job as cancelled; this listener sees it and cancels the whole statement.
 * Thrift's cancel and Connect's interrupt also interrupt the statement's thread (EngineProcess).
 * While no job of the statement runs, the UI lists none: there is nothing of it to kill there.
 *
 * Why no job (until issue 33 this was a "cancel watch" job: one task, in the statement's group,
 * tags and pool, waiting until released, handed over around the statement's own jobs): that task
 * held an executor slot for the statement's whole driver-side work and took one between two
 * stages of its own jobs. Measured on `local[1]`: a clustering compaction of 300 rows took
 * 602.5 s (the watch held the only slot between the sort job's two stages until its 10-minute
 * limit), `maintain` of a CLUSTER BY table and `maintain_warehouse` did not answer in 240 s; with
 * the watch off 3.8 s. With this observer, on `local[1]` (2 shared cores, a test pause of 0.8 s
 * before each commit and step): a clustering compaction 12.5 s, maintain of a CLUSTER BY table
 * 9.5 s, ALTER TABLE ... CLUSTER BY then maintain_warehouse 9.9 s, the clustering in a FAIR pool
 * while another pool's job held the slot 11.3 s (tests/test_one_slot.py); on one one-core
 * executor and under dynamic allocation from zero executors every one answered in 17-51 s
 * (tests/test_cluster.py). Where it did not hang, the watch job kept one core busy doing nothing
 * for every running statement, and under dynamic allocation asked for an executor to do so. A
 * watch that steps aside whenever another stage wants its slot (the other design weighed) would
 * still hold an otherwise idle slot, and an executor, for nothing; the observer holds none and
 * sees a cancel as it is sent (a job group cancel of a clustering in driver-only work on
 * `local[1]`: the statement failed 0.62 s later).
 *
 * Where the observer cannot be installed (a Spark without that event loop: logged once), a cancel
 * by group, tag or all jobs sent while no job of the statement runs reaches it only through its
 * next job (or not at all if none follows); interrupts of the statement's thread still do.
 */
final class CancelWatch(sc: SparkContext, onCancel: (String, String) => Unit, remember: Boolean = false)
  extends SparkListener with Logging {

  private final class State(val id: String, val group: String, val tags: Set[String]) {
    @volatile var cancelled = false
  }

  private val states = new ConcurrentHashMap[String, State]()        // by request id
  private val realJobs = new ConcurrentHashMap[Integer, State]()     // running jobs of watched requests

  /** With `remember`: the latest cancels and when they were sent (wall clock, ms), so that one
   * sent after a statement began but before it is watched (while Spark parses and analyses the
   * CALL: seconds for a session's first statement) still reaches it ([[watch]]'s `since`). */
  private val recent = new java.util.ArrayDeque[(Long, Cancel)]()

  private def hits(c: Cancel, s: State): Boolean = c.kind match {
    case "all" => true
    case "group" => c.key == s.group
    case "tag" => s.tags.contains(c.key)
    case _ => false
  }

  private def why(c: Cancel): String = s"the statement's Spark jobs were cancelled (${c.reason})"

  private val observer = new LanceCompactCancelEvents.Observer {
    override def cancelRequested(c: Cancel): Unit = {
      // remembered before the watched are looked at: a statement watched meanwhile finds it
      if (remember) recent.synchronized {
        recent.addLast((System.currentTimeMillis(), c))
        while (recent.size > CancelWatch.Remembered) recent.removeFirst()
      }
      states.values().forEach(s => if (hits(c, s)) cancel(s, why(c)))
    }
  }

  @volatile private var installed = false
  @volatile private var warned = false

  /** Whether cancels sent while no job of a statement runs are seen (the observer is installed).
   * Installed on first use, not when the watch is made: the plugin starts a worker (and so its
   * watch) while the SparkContext is being made, before it has a scheduler to observe (then
   * no statement of that worker saw a cancel of its group, tags or all jobs between its jobs). */
  def observing: Boolean = synchronized {
    if (!installed) installed = LanceCompactCancelEvents.observe(sc, observer)
    installed
  }

  /** Start watching request `id` (its jobs carry `tag`; `properties` are its caller's job
   * group, tags and pool). `since` (with `remember`): when the statement began (wall clock, ms,
   * [[CancelWatch.statementStart]]); a cancel of it sent since then is taken at once. */
  def watch(id: String, tag: String, properties: Map[String, String], since: Long = Long.MaxValue): Unit = {
    if (!observing && !warned) {
      warned = true
      logWarning("lance_compact: this Spark's scheduler cannot be observed; a cancel by job group, job tag " +
        "or all jobs sent while a statement runs no Spark job reaches it only through its next job")
    }
    val tags = properties.get(TagsKey).toSeq.flatMap(_.split(",")).filter(_.nonEmpty).toSet + tag
    val s = new State(id, properties.getOrElse(GroupKey, null), tags)
    states.put(id, s)
    if (remember && since != Long.MaxValue) {
      val missed = recent.synchronized { recent.toArray(Array.empty[(Long, Cancel)]).toSeq }
      missed.collectFirst { case (at, c) if at >= since && hits(c, s) => c }.foreach(c => cancel(s, why(c)))
    }
  }

  /** The request ended: forget it. */
  def unwatch(id: String): Unit = Option(states.remove(id)).foreach { s =>
    realJobs.values().removeIf(_ eq s)
  }

  /** The request was cancelled by other means: nothing more to report for it. */
  def cancelled(id: String): Unit = Option(states.get(id)).foreach(_.cancelled = true)

  private def cancel(s: State, why: String): Unit = {
    val first = s.synchronized { val was = s.cancelled; s.cancelled = true; !was }
    if (first) onCancel(s.id, why)
  }

  private def tagsOf(p: java.util.Properties): Seq[String] =
    Option(p).flatMap(x => Option(x.getProperty(TagsKey))).toSeq.flatMap(_.split(","))

  override def onJobStart(e: SparkListenerJobStart): Unit = {
    val tags = tagsOf(e.properties).toSet
    if (tags.nonEmpty) states.values().stream().filter(s => s.tags.exists(tags.contains)).findFirst()
      .ifPresent(s => realJobs.put(e.jobId, s))
  }

  override def onJobEnd(e: SparkListenerJobEnd): Unit = {
    val s = realJobs.remove(e.jobId)
    if (s != null) e.jobResult match {
      case JobFailed(ex) => CancelWatch.cancelText(String.valueOf(ex.getMessage)).foreach(cancel(s, _))
      case _ =>
    }
  }

  def stop(): Unit = {
    LanceCompactCancelEvents.forget(sc, observer)
    states.clear()
    realJobs.clear()
  }

  private def TagsKey = "spark.job.tags"
  private def GroupKey = "spark.jobGroup.id"
}

object CancelWatch {
  /** Cancels a remembering watch keeps (a statement is watched within seconds of its start). */
  private val Remembered = 256

  /** When the statement running on this thread began, wall clock ms: Spark's start of its
   * parse (the query's planning tracker, set while a CALL is analysed, which is when a procedure
   * runs); now when there is none (a call not made by a SQL statement). */
  def statementStart(): Long = try {
    import org.apache.spark.sql.catalyst.QueryPlanningTracker
    QueryPlanningTracker.get.flatMap(t => t.phases.get(QueryPlanningTracker.PARSING).orElse(
      t.phases.get(QueryPlanningTracker.ANALYSIS))).map(_.startTimeMs).getOrElse(System.currentTimeMillis())
  } catch { case NonFatal(_) | _: LinkageError => System.currentTimeMillis() }

  /** The job tags Spark Classic gives the jobs of a statement of the active session
   * (`SparkSession.addTag`'s and the session's own), which `SparkSession.interruptTag` /
   * `interruptAll` cancel. Spark applies them only while a query EXECUTES
   * (`SQLExecution.withSessionTagsApplied`, private to Spark); a procedure runs while the CALL
   * is analysed, so the engine's jobs take them here, read by reflection (empty when Spark
   * names them otherwise, or on Connect, whose interrupt reaches the statement's thread). */
  def sessionTags(): Seq[String] = try {
    val session: AnyRef = org.apache.spark.sql.SparkSession.active
    val c = session.getClass
    val own = c.getMethod("sessionJobTag").invoke(session).toString
    val managed = c.getMethod("managedJobTags").invoke(session) match {
      case t: ThreadLocal[_] => t.get()
      case other => other
    }
    val values: Seq[String] = managed match {
      case m: java.util.Map[_, _] => m.values().toArray.toSeq.map(_.toString)
      case m: scala.collection.Map[_, _] => m.values.map(_.toString).toSeq
      case _ => Nil
    }
    own +: values
  } catch { case _: Exception | _: LinkageError => Nil }

  private val JobCancelled = "Job \\d+ cancelled\\s*(.*)".r.unanchored

  /** Spark's text when a job was cancelled (its reason), else None. */
  def cancelText(message: String): Option[String] = message match {
    case JobCancelled(_) => Some(message.linesIterator.next())
    case _ => None
  }
}
