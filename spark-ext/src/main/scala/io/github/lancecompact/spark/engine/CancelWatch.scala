package io.github.lancecompact.spark.engine

import java.util.Properties
import java.util.concurrent.{ConcurrentHashMap, Executors, RejectedExecutionException, ScheduledExecutorService}
import java.util.concurrent.atomic.AtomicLong

import scala.util.Try

import org.apache.spark.{SparkContext, TaskContext, TaskKilledException}
import org.apache.spark.internal.Logging
import org.apache.spark.scheduler.{JobFailed, SparkListener, SparkListenerJobEnd, SparkListenerJobStart}

/** Makes every form of cancel reach a statement, even one sent while no Spark job of it runs.
 *
 * Spark's plain `cancelJobGroup`, `cancelJobsWithTag` and `cancelAllJobs` cancel ACTIVE jobs
 * only, and post no event at all when none is active (DAGScheduler.handleJobGroupCancelled
 * just logs "Failed to cancel job group ... Cannot find active jobs"). A statement spends
 * much of its time on the driver (planning, commits, index optimization, cleanup) with no
 * job running, so such a cancel was lost. So a watched request always has a "cancel watch"
 * active in its job group, tags and pool: a JVM-only job of one task that waits until
 * released. A cancel of the statement in any form (group, tag, all jobs, the UI's kill of
 * the job or its stage) fails that job; this listener sees it and marks the request cancelled
 * (`onCancel`), and the engine stops at its next check.
 *
 * When a real job of the request starts, the watch submitted before it is released and a new
 * one is submitted behind it. Spark's FIFO order puts the new watch's task after the real
 * job's, so it takes an executor slot only once the real job has none left to fill (its
 * tail, then the driver's work after it), and it is already active when the real job ends.
 * The engine submits its own jobs through [[EngineBridge.runJob]], which hands over at once,
 * on the submitting thread: the real job is queued in the DAGScheduler before the old watch
 * ends, so no cancel finds neither, and the old watch's slot is free before the real job's
 * tasks need it. Other jobs of the request are seen by this listener (`onJobStart`). In local
 * mode a released watch's task sees the release in this JVM and ends at once, or as soon as it
 * starts (a succeeded job named "cancel watch" in the UI); on a cluster the released watch job
 * is cancelled with the reason [[ReleasedReason]]. Any real job of the request that fails as
 * cancelled cancels the whole request too.
 */
final class CancelWatch(sc: SparkContext, onCancel: (String, String) => Unit)
  extends SparkListener with Logging {
  import CancelWatch._

  private final class State(val id: String, val tag: String, val properties: Map[String, String]) {
    var active = true
    var cancelled = false
    val realJobs = new java.util.HashSet[Integer]()
    var watchKey: String = _     // the current watch's key (null: none)
    var watchJob: Int = -1       // its job id, once submitted
  }

  private val states = new ConcurrentHashMap[String, State]()          // by request id
  private val byTag = new ConcurrentHashMap[String, State]()           // by request tag
  private val byWatch = new ConcurrentHashMap[String, State]()         // by watch key, until started
  private val watchJobs = new ConcurrentHashMap[Integer, (State, String)]() // started watches
  private val keys = new AtomicLong()
  private val timer: ScheduledExecutorService = Executors.newSingleThreadScheduledExecutor { r =>
    val t = new Thread(r, "lance-compact-cancel-watch")
    t.setDaemon(true)
    t
  }

  /** Start watching request `id` (its jobs carry `tag`; `properties` are its caller's job
   * group, tags and pool). The watch is submitted from a thread of its own. */
  def watch(id: String, tag: String, properties: Map[String, String]): Unit = {
    val s = new State(id, tag, properties)
    states.put(id, s)
    byTag.put(tag, s)
    s.synchronized(startWatch(s, onThisThread = false))
  }

  /** The request ended: release its watch and forget it. */
  def unwatch(id: String): Unit = Option(states.remove(id)).foreach { s =>
    byTag.remove(s.tag)
    s.synchronized { s.active = false; release(s) }
  }

  /** The request was cancelled by other means: no watch is needed any more. */
  def cancelled(id: String): Unit = Option(states.get(id)).foreach { s =>
    s.synchronized { s.cancelled = true; release(s) }
  }

  /** Job `jobId` of the request whose jobs carry one of `tags` was just submitted on this
   * thread (queued in the DAGScheduler ahead of any cancel sent from now on): release the
   * watch submitted before it, and submit the next one (behind it) on this thread. */
  def handOver(tags: Iterable[String], jobId: Int): Unit =
    tags.iterator.map(byTag.get).find(_ != null).foreach { s =>
      s.synchronized(realJobStarted(s, jobId, onThisThread = true))
    }

  /** A real job of `s` started: the watch submitted before it (or not yet known) is released
   * and a new one submitted (the caller holds `s`'s lock). */
  private def realJobStarted(s: State, jobId: Int, onThisThread: Boolean): Unit =
    if (s.watchKey == null || s.watchJob < 0 || s.watchJob < jobId) {
      release(s)
      startWatch(s, onThisThread)
    }

  private def startWatch(s: State, onThisThread: Boolean): Unit = {
    if (!s.active || s.cancelled || s.watchKey != null || sc.isStopped) return
    val key = s"${s.id}-${keys.incrementAndGet()}"
    s.watchKey = key
    byWatch.put(key, s)
    if (onThisThread) submit(s, key)
    else {
      // Local properties are per thread: the timer thread takes the request's.
      try timer.execute(() => submit(s, key))
      catch { case _: RejectedExecutionException => byWatch.remove(key); s.watchKey = null } // stopped
    }
  }

  private def submit(s: State, key: String): Unit = {
    val saved = Inherited.map(k => k -> sc.getLocalProperty(k))
    try {
      Inherited.foreach(k => sc.setLocalProperty(k, null))
      s.properties.foreach { case (k, v) => sc.setLocalProperty(k, v) }
      val tags = (s.properties.get(TagsKey).toSeq.flatMap(_.split(",")) :+ s.tag :+ WatchTag)
        .filter(_.nonEmpty).distinct
      sc.setLocalProperty(TagsKey, tags.mkString(","))
      sc.setLocalProperty(KeyProperty, key)
      sc.setLocalProperty(DescriptionKey,
        "lance_compact: cancel watch (holds the statement's cancel while no job of it runs)")
      val rdd = sc.parallelize(Seq(0), 1)
      val job = sc.submitJob(rdd, new Hold(key), Seq(0), (_: Int, _: Unit) => (), ())
      s.synchronized { if (s.watchKey == key) s.watchJob = job.jobIds.head }
      // A job of a group cancelled with its future jobs (cancelJobGroupAndFutureJobs) is failed
      // as it is submitted, with no listener event: its future says so.
      job.onComplete {
        case scala.util.Failure(e) =>
          val why = cancelText(String.valueOf(e.getMessage))
          if (why.isDefined && !Released.containsKey(key)) s.synchronized {
            if (s.watchKey == key && !s.cancelled) {
              s.cancelled = true
              onCancel(s.id, why.get)
            }
          }
        case _ =>
      }(scala.concurrent.ExecutionContext.parasitic)
    } catch {
      case e: Exception =>
        logDebug(s"cancel watch of request ${s.id} not started", e)
        byWatch.remove(key)
        s.synchronized { if (s.watchKey == key) s.watchKey = null }
    } finally {
      saved.foreach { case (k, v) => sc.setLocalProperty(k, v) }
    }
  }

  /** Release the current watch (the caller holds `s`'s lock). */
  private def release(s: State): Unit = {
    val key = s.watchKey
    if (key == null) return
    val job = s.watchJob
    s.watchKey = null
    s.watchJob = -1
    CancelWatch.release(key)
    // Local mode: its task, in this JVM, ends on the release. On a cluster, cancel the job
    // (not yet started: onJobStart cancels it).
    if (job < 0 || sc.isLocal) return
    Try(timer.execute(() => if (watchJobs.containsKey(job)) Try(sc.cancelJob(job, ReleasedReason))))
  }

  private def tagsOf(p: Properties): Seq[String] =
    Option(p).flatMap(x => Option(x.getProperty(TagsKey))).toSeq.flatMap(_.split(","))

  override def onJobStart(e: SparkListenerJobStart): Unit = {
    val key = Option(e.properties).map(_.getProperty(KeyProperty)).orNull
    if (key != null) {
      Option(byWatch.remove(key)).foreach { s =>
        watchJobs.put(e.jobId, (s, key))
        s.synchronized {
          if (s.watchKey != key && !sc.isLocal) Try(sc.cancelJob(e.jobId, ReleasedReason)) // released before it started
        }
      }
      return
    }
    tagsOf(e.properties).iterator.map(byTag.get).find(_ != null).foreach { s =>
      s.synchronized { s.realJobs.add(e.jobId); realJobStarted(s, e.jobId, onThisThread = false) }
    }
  }

  override def onJobEnd(e: SparkListenerJobEnd): Unit = {
    val cancel = e.jobResult match {
      case JobFailed(ex) => cancelText(String.valueOf(ex.getMessage))
      case _ => None
    }
    val watch = watchJobs.remove(e.jobId)
    if (watch != null) {
      val (s, key) = watch
      val released = Released.remove(key) != null
      s.synchronized {
        val current = s.watchKey == key
        if (current) { s.watchKey = null; s.watchJob = -1 }
        cancel match {
          case Some(why) if !released && !why.contains(ReleasedReason) =>
            s.cancelled = true
            onCancel(s.id, why)
          case _ => if (current) startWatch(s, onThisThread = false) // it ended on its own: watch again
        }
      }
      return
    }
    byTag.values().stream().filter(_.realJobs.contains(e.jobId)).findFirst().ifPresent { s =>
      s.synchronized {
        s.realJobs.remove(e.jobId)
        cancel.foreach { why =>
          s.cancelled = true
          onCancel(s.id, why)
        }
      }
    }
  }

  def stop(): Unit = timer.shutdownNow()
}

/** A watch job's task: [[CancelWatch.hold]]. A class of its own, not a lambda: Spark's closure
 * cleaner reads a lambda's class file from the jar (ASM) on every job it submits (seen in the
 * driver's samples during warm statements); an object that is no closure is passed as it is. */
private final class Hold(key: String) extends (Iterator[Int] => Unit) with Serializable {
  override def apply(partition: Iterator[Int]): Unit = CancelWatch.hold(key)
}

object CancelWatch {
  private val TagsKey = "spark.job.tags"
  private val DescriptionKey = "spark.job.description"
  /** Local properties a watch job takes from its request. */
  private val Inherited = EngineBridge.Inherited :+ DescriptionKey
  /** The local property naming a watch job (its key). */
  val KeyProperty = "lance.compact.cancelWatch"
  /** The job tag of every watch job (to leave them out of a request's running tasks). */
  val WatchTag = "lance-compact-cancel-watch"
  /** The reason a watch job is cancelled with when it is released on a cluster. */
  val ReleasedReason = "lance_compact: cancel watch released (the statement's own job started or it ended)"
  private val StepMs = 10L
  /** Longest a watch task runs; the listener starts another if the statement still needs one. */
  private val MaxHoldMs = 600000L

  /** Released watches (in local mode the task, in this JVM, sees its key here). */
  private val Released = new ConcurrentHashMap[String, java.lang.Boolean]()
  /** Waited on by watch tasks of this JVM, notified on each release. */
  private val ReleaseSignal = new Object

  private def release(key: String): Unit = {
    Released.put(key, java.lang.Boolean.TRUE)
    ReleaseSignal.synchronized(ReleaseSignal.notifyAll())
  }

  /** The watch's task: wait until released (at once, in this JVM), killed (its job cancelled;
   * looked at every [[StepMs]]) or [[MaxHoldMs]] passed. */
  def hold(key: String): Unit = {
    val context = TaskContext.get()
    val end = System.nanoTime() + MaxHoldMs * 1000000L
    ReleaseSignal.synchronized {
      while (!Released.containsKey(key) && System.nanoTime() < end) {
        if (context != null && context.isInterrupted())
          throw new TaskKilledException("cancelled")
        ReleaseSignal.wait(StepMs)
      }
    }
  }

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
