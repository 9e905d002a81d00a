package io.github.lancecompact.spark.engine

import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong

import org.apache.spark.SparkContext
import org.apache.spark.internal.Logging

import io.github.lancecompact.spark.catalog.Names
import io.github.lancecompact.spark.ui.{LanceEngineFigures, LanceStatementStarted, LanceStatementStep, LanceUiPublish}

/** What a statement is doing now, as its engine request says (python/lance_compact/runtime/
 * progress.py), shown where people look:
 *
 *  - in the Spark UI, as a job named `lance_compact <action> <table>: <step>` (a job of no
 *    tasks, posted under the statement's job group and tags): the steps the engine does without a
 *    Spark job (a small rewrite in local mode, commits, index work, cleanup) are listed there too;
 *    a warehouse run lists each table's first step only (the engine says which);
 *  - in the driver's log (INFO);
 *  - for the caller that asked, by the key it set as the local property [[KeyProperty]] before
 *    its statement ([[line]]): the PySpark API polls it to draw a live line in a notebook, with the
 *    task counts of the statement's running Spark jobs.
 *
 *  - on the Lance tab's Running page ([[LanceUiPublish]]): a procedure's statement (the one
 *    [[statement]] names on the caller's thread) is posted as it starts and at each step; its
 *    cancel there is Spark's cancel of the request's tag ([[cancel]]).
 *
 * Bounded: an entry lives while its request does; a key longer than [[MaxKey]] is ignored.
 */
object Progress extends Logging {
  val KeyProperty = "lance_compact.progress"
  private val JobDescription = "spark.job.description"  // SparkContext.SPARK_JOB_DESCRIPTION
  private val MaxKey = 64

  private final case class Entry(text: String, tag: String)
  private val keyOf = new ConcurrentHashMap[String, String]()  // request tag -> caller's key
  private val byKey = new ConcurrentHashMap[String, Entry]()
  @volatile private var context: SparkContext = _

  /** A procedure's statement on its caller's thread: numbered (`id`, 0 until its request is
   * queued) for the Lance tab, which never sees its request's tag. */
  final class Statement private[Progress] (val procedure: String, val table: String, val budgetMs: Long) {
    @volatile var id: Long = 0L
  }
  private val current = new ThreadLocal[Statement]()
  private val statementIds = new AtomicLong()
  private val tagOf = new ConcurrentHashMap[java.lang.Long, String]()   // running statement -> request tag
  private val idOf = new ConcurrentHashMap[String, java.lang.Long]()    // request tag -> running statement

  /** Run `body` (a procedure's call of the engine) as statement `procedure` of `table` on this
   * thread; `budgetMs` its time budget (0: none). */
  def statement[T](procedure: String, table: String, budgetMs: Long)(body: Statement => T): T = {
    val s = new Statement(procedure, table, budgetMs)
    current.set(s)
    try body(s) finally current.remove()
  }

  /** On the caller's thread, as its request is queued: remember the caller's key, if it set one,
   * and, for a procedure's statement, post its start. */
  private[engine] def started(sc: SparkContext, requestTag: String): Unit = {
    context = sc
    Option(sc.getLocalProperty(KeyProperty)).filter(k => k.nonEmpty && k.length <= MaxKey)
      .foreach(k => keyOf.put(requestTag, k))
    Option(current.get).filter(_.id == 0L).foreach { s =>
      s.id = statementIds.incrementAndGet()
      tagOf.put(s.id, requestTag)
      idOf.put(requestTag, s.id)
      LanceUiPublish.post(sc, LanceStatementStarted(s.id, requestTag, s.procedure, s.table,
        LanceUiPublish.user(sc), System.currentTimeMillis(), s.budgetMs))
    }
  }

  /** Cancel running statement `id` as Spark cancels its request's tag (the engine's CancelWatch
   * sees it as the statement's cancel); false when it no longer runs. */
  def cancel(sc: SparkContext, id: Long): Boolean = Option(tagOf.get(id)).exists { tag =>
    sc.cancelJobsWithTag(tag)
    true
  }

  /** On the caller's thread, while its statement waits for a free engine worker: its line says
   * so (the engine's first words replace it); `text` null: it no longer waits. */
  private[engine] def waiting(sc: SparkContext, text: String): Unit = {
    context = sc
    Option(sc.getLocalProperty(KeyProperty)).filter(k => k.nonEmpty && k.length <= MaxKey).foreach { k =>
      if (text != null) byKey.put(k, Entry(Names.show(text), ""))
      else byKey.computeIfPresent(k, (_, e) => if (e.tag.isEmpty) null else e)
    }
  }

  /** The request ended (answered, failed or abandoned). */
  private[engine] def ended(requestTag: String): Unit = {
    Option(keyOf.remove(requestTag)).foreach(byKey.remove)
    Option(idOf.remove(requestTag)).foreach(id => tagOf.remove(id))
  }

  /** The engine says what request `requestTag` of `action` is doing: kept for its caller, logged,
   * and, where `ui`, shown in the UI as a job of no tasks under `properties` (the caller's job
   * group, tags and pool) and the request's tag. Never fails: it is a view. */
  private[engine] def said(sc: SparkContext, requestTag: String, action: String, text: String,
                           properties: Map[String, String], ui: Boolean = true): Unit = {
    val line = Names.show(text.take(300))  // one line, whatever a name in it holds
    Option(keyOf.get(requestTag)).foreach(k => byKey.put(k, Entry(line, requestTag)))
    logInfo(s"lance_compact $action: $line")
    Option(idOf.get(requestTag)).foreach(id => LanceUiPublish.post(sc, LanceStatementStep(id, line, System.currentTimeMillis())))
    if (ui) {
      try mark(sc, s"lance_compact $action $line", properties, requestTag)
      catch { case e: Exception => logDebug(s"progress job not posted: $e") }
    }
  }

  /** The engine's figures for request `requestTag` (python/lance_compact/runtime/progress.py: a
   * batch, one JSON object a line), each posted for the Lance tab when the request is a
   * procedure's statement. Never fails: a view. */
  private[engine] def figures(sc: SparkContext, requestTag: String, json: String): Unit =
    Option(idOf.get(requestTag)).foreach { id =>
      json.split('\n').iterator.filter(_.nonEmpty).foreach { one =>
        val catalog = scala.util.Try(io.github.lancecompact.spark.ui.PageHtml.mapper.readTree(one).path("catalog").asText("")).getOrElse("")
        LanceUiPublish.post(sc, LanceEngineFigures(id, catalog, one, System.currentTimeMillis()))
      }
    }

  /** A job of no tasks named `description`: DAGScheduler posts its start and end at once and runs
   * nothing (no slot, no executor), so it costs a listener event. */
  private def mark(sc: SparkContext, description: String, properties: Map[String, String], tag: String): Unit = {
    val keys = EngineBridge.Inherited :+ JobDescription
    val saved = keys.map(k => k -> sc.getLocalProperty(k))
    try {
      EngineBridge.Inherited.foreach(k => sc.setLocalProperty(k, properties.getOrElse(k, null)))
      val tags = (properties.get("spark.job.tags").toSeq.flatMap(_.split(",")) :+ tag).filter(_.nonEmpty).distinct
      sc.setLocalProperty("spark.job.tags", tags.mkString(","))
      sc.setLocalProperty(JobDescription, description)
      sc.submitJob(sc.emptyRDD[Int], NoWork, Seq.empty[Int], (_: Int, _: Unit) => (), ())
    } finally saved.foreach { case (k, v) => sc.setLocalProperty(k, v) }
  }

  /** The statement's line for the caller whose key is `key`: the engine's latest words and, while
   * Spark jobs of it run, their tasks done of planned; "" when it has said nothing (yet). */
  def line(key: String): String = Option(byKey.get(key)).map { e =>
    val tasks = Option(context).flatMap(sc => scala.util.Try(runningTasks(sc, e.tag)).toOption.flatten)
    e.text + tasks.map { case (done, all) => s" ($done of $all tasks done)" }.getOrElse("")
  }.getOrElse("")

  /** Tasks done and planned over the stages of the request's running jobs, if any run. */
  private def runningTasks(sc: SparkContext, tag: String): Option[(Int, Int)] = {
    val tracker = sc.statusTracker
    val stages = tracker.getJobIdsForTag(tag).toSeq.flatMap(id => tracker.getJobInfo(id).toSeq)
      .filter(_.status() == org.apache.spark.JobExecutionStatus.RUNNING)
      .flatMap(_.stageIds().toSeq).distinct.flatMap(id => tracker.getStageInfo(id).toSeq)
    if (stages.isEmpty) None
    else Some((stages.map(_.numCompletedTasks()).sum, stages.map(_.numTasks()).sum))
  }

  /** What a job of [[mark]] would do with a partition: it has none. */
  private object NoWork extends (Iterator[Int] => Unit) with Serializable {
    override def apply(it: Iterator[Int]): Unit = ()
  }
}
