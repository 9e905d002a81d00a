package org.apache.spark.scheduler

import java.util.concurrent.CopyOnWriteArrayList

import scala.util.control.NonFatal

import org.apache.spark.SparkContext

/** Sees every cancel Spark is asked for -- of a job group, of a job tag, of all jobs -- whether or
 * not a job is active, with no job, task or executor slot of its own (CancelWatch.scala, issue 33).
 *
 * `SparkContext.cancelJobGroup`/`cancelJobGroupAndFutureJobs`, `cancelJobsWithTag` (which
 * `SparkSession.interruptAll`/`interruptTag` call) and `cancelAllJobs` (spark-sql's Ctrl-C) all post
 * an event to the DAGScheduler's event loop (`JobGroupCancelled`, `JobTagCancelled`,
 * `AllJobsCancelled`); when no job matches, Spark drops it with no listener event. This puts a
 * loop in front of Spark's own (`DAGScheduler.setEventProcessLoop`, which Spark keeps for its
 * tests; read in 4.2.0, checked on each 4.x line by bin/check-spark-versions): its `post` shows each cancel to the observers, then hands every event, unchanged
 * and in order, to Spark's loop, which alone runs (this one's thread is never started). It lives
 * in Spark's package because that loop class is `private[scheduler]`; the events are read by
 * class name and fields, so a Spark that renames them is seen as "nothing to observe", never a
 * failure. [[observe]] says whether it is installed; where it cannot be (a Spark without that
 * method), it returns false and Spark's scheduler is left as it was.
 */
object LanceCompactCancelEvents {
  /** A cancel Spark was asked for: `kind` "group" (`key` the job group), "tag" (`key` the job
   * tag) or "all" (`key` null); `reason` as Spark words it for the jobs it cancels. */
  final case class Cancel(kind: String, key: String, reason: String)

  /** Told of each cancel on the cancelling thread, before Spark acts on it: must be quick. */
  trait Observer { def cancelRequested(cancel: Cancel): Unit }

  private val GroupEvent = "org.apache.spark.scheduler.JobGroupCancelled"
  private val TagEvent = "org.apache.spark.scheduler.JobTagCancelled"
  private val AllEvent = "org.apache.spark.scheduler.AllJobsCancelled$"

  private final class Hook(dag: DAGScheduler, val spark: DAGSchedulerEventProcessLoop)
    extends DAGSchedulerEventProcessLoop(dag) {
    val observers = new CopyOnWriteArrayList[Observer]()

    override def post(event: DAGSchedulerEvent): Unit = {
      if (!observers.isEmpty) cancelOf(event).foreach { c =>
        observers.forEach(o => try o.cancelRequested(c) catch { case NonFatal(_) => () })
      }
      spark.post(event)
    }
    override def start(): Unit = spark.start()
    override def stop(): Unit = spark.stop()
    override def isActive: Boolean = spark.isActive
  }

  /** The cancel `event` asks for, if it is one (read by its class name and fields). */
  private[spark] def cancelOf(event: AnyRef): Option[Cancel] = {
    val name = event.getClass.getName
    if (name != GroupEvent && name != TagEvent && name != AllEvent) return None
    event match {
      case _ if name == AllEvent => Some(Cancel("all", null, "as part of cancellation of all jobs"))
      case p: Product =>
        val key = p.productIterator.collectFirst { case s: String => s }
        val stated = p.productIterator.collectFirst { case Some(s: String) => s }
        key.map { k =>
          if (name == GroupEvent) Cancel("group", k, stated.getOrElse(s"part of cancelled job group $k"))
          else Cancel("tag", k, stated.getOrElse(s"part of cancelled job tags $k"))
        }
      case _ => None
    }
  }

  /** Tell `observer` of every cancel `sc` is asked for from now on; false (and nothing changed)
   * when this Spark's scheduler cannot be observed so. */
  def observe(sc: SparkContext, observer: Observer): Boolean = synchronized {
    try {
      val dag = sc.dagScheduler
      val hook = dag.eventProcessLoop match {
        case h: Hook => h
        case loop =>
          val h = new Hook(dag, loop)
          dag.setEventProcessLoop(h)
          h
      }
      hook.observers.add(observer)
      true
    } catch { case NonFatal(_) | _: LinkageError => false }
  }

  /** Whether `sc`'s scheduler is observed (for checks of a Spark version). */
  def installed(sc: SparkContext): Boolean =
    try sc.dagScheduler.eventProcessLoop.isInstanceOf[Hook]
    catch { case NonFatal(_) | _: LinkageError => false }

  /** Stop telling `observer` (Spark's scheduler keeps the pass-through loop). */
  def forget(sc: SparkContext, observer: Observer): Unit = synchronized {
    try sc.dagScheduler.eventProcessLoop match {
      case h: Hook => h.observers.remove(observer)
      case _ =>
    } catch { case NonFatal(_) | _: LinkageError => () }
  }
}
