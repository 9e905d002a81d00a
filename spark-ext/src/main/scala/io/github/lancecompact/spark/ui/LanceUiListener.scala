package io.github.lancecompact.spark.ui

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.spark.scheduler._
import org.apache.spark.util.kvstore.KVStore

/** Turns the product's events ([[LanceUiEvents]]) and Spark's job and task events into the
 * records the Lance tab reads ([[LanceUiRecords]]), in the application's status store: live
 * (registered by the plugin) and in the history server (made by its plugin while it replays an
 * event log), the same code both ways.
 *
 * A statement's cost in tasks comes from Spark's own events: its jobs carry its job tag, so their
 * stages' tasks (done, planned) and executor run time are summed here. Its bytes come from its
 * result rows. Called on one listener thread: its maps need no locks; they hold running
 * statements only. The store keeps the newest [[RetainedStatements]] ended statements and
 * [[RetainedLayouts]] layouts (a service maintaining every ten minutes runs for weeks), and one
 * health row per table.
 */
final class LanceUiListener(store: KVStore, retainedStatements: Int = LanceUiListener.RetainedStatements,
                            retainedLayouts: Int = LanceUiListener.RetainedLayouts) extends SparkListener {
  private val mapper = new ObjectMapper()
  private val byTag = mutable.Map.empty[String, Long]
  private val byStage = mutable.Map.empty[Int, Long]
  private val stagesOf = mutable.Map.empty[Long, mutable.Set[Int]]
  private val lastWrite = mutable.Map.empty[Long, Long]

  private def statement(id: Long): Option[LanceStatementRecord] =
    try Some(store.read(classOf[LanceStatementRecord], id)) catch { case _: NoSuchElementException => None }

  private def update(id: Long)(f: LanceStatementRecord => LanceStatementRecord): Unit =
    statement(id).foreach(r => store.write(f(r)))

  override def onOtherEvent(event: SparkListenerEvent): Unit = event match {
    case s: LanceStatementStarted =>
      trim(classOf[LanceStatementRecord], retainedStatements)(_.outcome != "running")
      byTag(s.tag) = s.id
      store.write(LanceStatementRecord(s.id, s.procedure, s.table, s.user, s.startedAt, 0L, "", "running",
        "", "", s.budgetMs, 0, 0, 0L))
    case s: LanceStatementStep => update(s.id)(_.copy(step = s.step))
    case e: LanceStatementEnded =>
      flush(e.id, e.endedAt)
      update(e.id)(_.copy(endedAt = e.endedAt, outcome = e.outcome, error = e.error, rowsJson = e.rowsJson))
      byTag.filterInPlace { case (_, id) => id != e.id }
      stagesOf.remove(e.id).foreach(_.foreach(byStage.remove))
      lastWrite.remove(e.id)
    case h: LanceHealthEvaluated =>
      LanceUiListener.rows(mapper, h.rowsJson).foreach { row =>
        val key = s"${h.catalog}.${text(row, "namespace")}.${text(row, "table")}"
        store.write(LanceTableHealthRecord(key, h.catalog, h.at, row.toString,
          Option(row.get("health_score")).filter(_.isNumber).map(_.asInt).getOrElse(-1),
          PageHtml.html(WarehousePage.line(key, h.catalog, h.at, row))))
      }
    case l: LanceLayoutDescribed =>
      LanceUiListener.rows(mapper, l.rowsJson).headOption.foreach(row => layout(l.catalog, l.table, l.at, row.toString))
    case f: LanceEngineFigures =>
      val j = mapper.readTree(f.json)
      def n(k: String): Long = Option(j.get(k)).filter(_.isNumber).map(_.asLong).getOrElse(-1L)
      j.path("kind").asText match {
        case "progress" => update(f.id)(_.copy(bytesRead = n("bytes_read"), bytesWritten = n("bytes_written")))
        case "cost" => update(f.id) { r =>
          val all = if (r.costsJson.isEmpty) mapper.createArrayNode() else mapper.readTree(r.costsJson).asInstanceOf[com.fasterxml.jackson.databind.node.ArrayNode]
          all.add(j)
          r.copy(costsJson = all.toString)
        }
        case "layout" => layout(f.catalog, j.path("table").asText, f.at, j.path("row").toString)
        case _ =>
      }
    case _ =>
  }

  private def layout(catalog: String, table: String, at: Long, rowJson: String): Unit = {
    trim(classOf[LanceLayoutRecord], retainedLayouts)(_ => true)
    // two layouts of one table in the same millisecond (before and after a quick step) both kept
    var t = at
    def taken(k: String) = try { store.read(classOf[LanceLayoutRecord], k); true } catch { case _: NoSuchElementException => false }
    while (taken(s"$catalog.$table@$t")) t += 1
    store.write(LanceLayoutRecord(s"$catalog.$table@$t", catalog, table, t, rowJson))
  }

  /** Make room for one more record of `kind`: the oldest (by natural key: statements by number)
   * that `removable` allows go beyond `keep - 1`. */
  private def trim[T](kind: Class[T], keep: Int)(removable: T => Boolean): Unit = {
    val over = store.count(kind) - (keep - 1)
    if (over > 0) {
      val it = store.view(kind).closeableIterator()
      try {
        val gone = it.asScala.filter(removable).take(over.toInt).toList
        gone.foreach {
          case r: LanceStatementRecord => store.delete(kind, r.id)
          case r: LanceLayoutRecord => store.delete(kind, r.key)
          case _ =>
        }
      } finally it.close()
    }
  }

  private def text(row: com.fasterxml.jackson.databind.JsonNode, field: String): String =
    Option(row.get(field)).filterNot(_.isNull).map(_.asText).getOrElse("")

  override def onJobStart(job: SparkListenerJobStart): Unit = if (byTag.nonEmpty) {
    val tags = Option(job.properties).flatMap(p => Option(p.getProperty("spark.job.tags"))).toSeq.flatMap(_.split(","))
    tags.flatMap(byTag.get).headOption.foreach { id =>
      val stages = job.stageInfos
      stages.foreach(s => byStage(s.stageId) = id)
      stagesOf.getOrElseUpdate(id, mutable.Set.empty) ++= stages.map(_.stageId)
      val planned = stages.map(_.numTasks).sum
      if (planned > 0) update(id)(r => r.copy(tasksAll = r.tasksAll + planned))
    }
  }

  override def onTaskEnd(task: SparkListenerTaskEnd): Unit = byStage.get(task.stageId).foreach { id =>
    val ms = Option(task.taskMetrics).map(_.executorRunTime).getOrElse(0L)
    pending(id) = pending.getOrElse(id, (0, 0L)) match { case (n, t) => (n + 1, t + ms) }
    // at most a write a second per statement: a page shows progress, not every task
    val now = System.currentTimeMillis()
    if (now - lastWrite.getOrElse(id, 0L) >= 1000L) flush(id, now)
  }

  private val pending = mutable.Map.empty[Long, (Int, Long)]

  private def flush(id: Long, now: Long): Unit = pending.remove(id).foreach { case (n, ms) =>
    lastWrite(id) = now
    update(id)(r => r.copy(tasksDone = r.tasksDone + n, taskMs = r.taskMs + ms))
  }

  override def onJobEnd(job: SparkListenerJobEnd): Unit =
    pending.keys.toSeq.foreach(id => flush(id, System.currentTimeMillis()))
}

object LanceUiListener {
  val RetainedStatements = 1000
  val RetainedLayouts = 500

  /** The rows of an event's `rowsJson` (a JSON array of objects). */
  def rows(mapper: ObjectMapper, json: String): Seq[com.fasterxml.jackson.databind.JsonNode] =
    if (json == null || json.isEmpty) Nil else mapper.readTree(json).elements().asScala.toSeq
}
