package io.github.lancecompact.spark.ui

import scala.jdk.CollectionConverters._
import scala.xml.{Node, NodeSeq, Text}

import com.fasterxml.jackson.databind.JsonNode
import jakarta.servlet.http.HttpServletRequest
import org.apache.spark.util.kvstore.KVStore

import PageHtml._

/** A statement's figures as its result rows and Spark's tasks give them: the History page and the
 * Table page show the same ones. Bytes read are compact's `bytes_read`, or a warehouse run's
 * `bytes_rewritten` (the bytes its compactions read and rewrote); bytes written compact's
 * `bytes_written`; task-seconds the executor run time of its Spark tasks (a small rewrite in the
 * engine's own process runs none). */
object StatementFigures {
  def results(s: LanceStatementRecord): Seq[JsonNode] = rows(s.rowsJson)
  /** None when no row says (a describe, a cleanup): the page shows nothing rather than 0. */
  def bytesRead(rs: Seq[JsonNode]): Option[Long] = sum(rs.flatMap(r => long(r, "bytes_read").orElse(long(r, "bytes_rewritten"))))
  def bytesWritten(rs: Seq[JsonNode]): Option[Long] = sum(rs.flatMap(long(_, "bytes_written")))
  private def sum(xs: Seq[Long]): Option[Long] = if (xs.isEmpty) None else Some(xs.sum)
  /** What a running statement read and wrote so far, as its engine last said; before it said,
   * why there is nothing yet (or nothing at all: a cleanup measures no bytes). */
  def soFar(s: LanceStatementRecord): String = {
    val said = Seq(if (s.bytesRead >= 0) s"read ${bytes(s.bytesRead)}" else "",
      if (s.bytesWritten >= 0) s"written ${bytes(s.bytesWritten)}" else "").filter(_.nonEmpty).mkString(", ")
    if (said.nonEmpty) said
    else if (s.procedure == "cleanup") "not measured (a cleanup deletes files; its row counts them)"
    else "none yet (said as each rewrite task ends, or when an index's segments are built)"
  }

  /** The maintenance versions the statement committed, with their cost as kept with the table. */
  def costs(s: LanceStatementRecord): Seq[JsonNode] = rows(s.costsJson)

  def elapsed(s: LanceStatementRecord, now: Long): Long = (if (s.endedAt > 0) s.endedAt else now) - s.startedAt

  /** The statements in the store, newest first. */
  def all(store: KVStore): Seq[LanceStatementRecord] =
    store.view(classOf[LanceStatementRecord]).asScala.toSeq.sortBy(-_.id)

  /** What a row of a warehouse run did to its table, in words. */
  def outcome(r: JsonNode): String = {
    val error = text(r, "error")
    if (error.nonEmpty) "failed" else Seq(text(r, "outcome"), if (text(r, "ran") == "true") "ran" else "skipped").find(_.nonEmpty).get
  }
}

/** `/lance/running/`: this application's statements still running: procedure, table, user, the
 * engine's current step, its tasks, budget used, elapsed; a cancel button for viewers with the
 * modify ACL, on the live UI only (`cancel`). */
final class RunningPage(store: KVStore, live: Boolean) extends LanceCompactPage {
  override val prefix = "running"
  override val title = "Lance: running"

  override def render(request: HttpServletRequest, canModify: Boolean, base: String): Seq[Node] = {
    val now = System.currentTimeMillis()
    val running = StatementFigures.all(store).filter(_.outcome == "running")
    val offerCancel = live && canModify
    val headers = Seq("#", "procedure", "table", "user", "step", "progress", "tasks", "task time", "bytes",
      "budget used", "elapsed") ++ (if (offerCancel) Seq("") else Nil)
    val body = running.map { s =>
      val elapsed = StatementFigures.elapsed(s, now)
      val share = if (s.tasksAll > 0) s.tasksDone * 100 / s.tasksAll else 0
      <tr>
        {cell(Text(s.id.toString), s.id)}<td>{s.procedure}</td><td>{s.table}</td><td>{s.user}</td>
        <td class="small">{s.step}</td>
        <td>{if (s.tasksAll > 0) <div class="progress" style="min-width: 8em"><div class="progress-bar" role="progressbar" style={s"width: $share%"}>{s"$share%"}</div></div> else NodeSeq.Empty}</td>
        {cell(Text(s"${s.tasksDone} of ${s.tasksAll}"), s.tasksDone)}
        {cell(Text(duration(s.taskMs)), s.taskMs)}
        {cell(Text(StatementFigures.soFar(s)), math.max(0L, s.bytesRead) + math.max(0L, s.bytesWritten), "lance-bytes")}
        {cell(Text(if (s.budgetMs > 0) s"${elapsed * 100 / s.budgetMs}% of ${duration(s.budgetMs)}" else "no time budget"), if (s.budgetMs > 0) elapsed * 100 / s.budgetMs else -1)}
        {cell(Text(duration(elapsed)), elapsed)}
        {if (offerCancel) <td><form method="post" action={s"$base/lance/cancel/"} onsubmit="return confirm('Cancel this statement?');" style="display: inline">
            <input type="hidden" name="id" value={s.id.toString}/><button type="submit" class="btn btn-sm btn-outline-danger">cancel</button></form></td>
         else NodeSeq.Empty}
      </tr>
    }
    nav(base, "running") ++
    <p>{if (live) s"Statements of this application running now (as of ${when(now)})."
        else "A finished application has nothing running: listed here are only the statements that had not " +
          "ended when its event log ended (the application was killed, or its log cut short, during them)."}</p> ++
    (if (running.isEmpty) empty(if (live) "No Lance statement is running." else
       "Nothing: every statement of this application ended before its event log did.")
     else table("lance-running", headers, body, "filter statements"))
  }
}

/** `/lance/history/`: what each ended statement did to which table, with its cost (bytes read
 * and written, task-seconds, elapsed) and outcome; a failure's message; a warehouse run's tables
 * beneath it. */
final class HistoryPage(store: KVStore) extends LanceCompactPage {
  override val prefix = "history"
  override val title = "Lance: history"

  override def render(request: HttpServletRequest, canModify: Boolean, base: String): Seq[Node] = {
    val ended = StatementFigures.all(store).filter(_.outcome != "running")
    val headers = Seq("#", "ended", "procedure", "table", "user", "outcome", "bytes read", "bytes written",
      "task-seconds", "elapsed", "message")
    val body = ended.flatMap(s => HistoryPage.lines(s))
    nav(base, "history") ++
    (if (ended.isEmpty) empty("No Lance statement has ended yet.") else table("lance-history", headers, body, "filter history"))
  }
}

object HistoryPage {
  /** A statement's row and, for a warehouse run, a row per table it reported on (`only`: that table's alone). */
  def lines(s: LanceStatementRecord, only: Option[String] = None): Seq[Node] = {
    val rs = StatementFigures.results(s)
    val (read, written) = (StatementFigures.bytesRead(rs), StatementFigures.bytesWritten(rs))
    val elapsed = StatementFigures.elapsed(s, s.endedAt)
    val main =
      <tr class={s"lance-statement lance-${s.outcome}"} data-id={s.id.toString}>
        {cell(Text(s.id.toString), s.id)}{cell(Text(when(s.endedAt)), s.endedAt)}
        <td>{s.procedure}</td><td>{s.table}</td><td>{s.user}</td>
        <td class={if (s.outcome == "succeeded") "text-success" else "text-danger"}>{s.outcome}</td>
        {cell(Text(read.map(bytes).getOrElse("")), read.getOrElse(-1L), "lance-bytes-read")}{cell(Text(written.map(bytes).getOrElse("")), written.getOrElse(-1L), "lance-bytes-written")}
        {cell(Text(f"${s.taskMs / 1000.0}%.1f"), s.taskMs, "lance-task-seconds")}{cell(Text(duration(elapsed)), elapsed, "lance-elapsed")}
        <td class="small text-danger">{s.error}</td>
      </tr>
    // each maintenance version it committed, with its cost as kept with the table: the figures
    // lance.system.maintenance_history shows for that version (a warehouse run's beneath each table's line)
    val costs = StatementFigures.costs(s).filter(c => only.forall(o => text(c, "table") == o)).groupBy(text(_, "table"))
    def versions(table: String): Seq[Node] = costs.getOrElse(table, Nil).map { c =>
      def n(k: String) = long(c, k)
      <tr class="lance-version-cost small" data-id={s.id.toString} data-table={text(c, "table")} data-version={text(c, "version")}>
        {cell(Text(""), s.id)}{cell(Text(""), s.endedAt)}<td>{s"version ${text(c, "version")}: ${text(c, "step")}"}</td><td>{text(c, "table")}</td><td></td>
        <td>committed</td>
        {cell(Text(n("bytes_read").map(bytes).getOrElse("")), n("bytes_read").getOrElse(-1L))}{cell(Text(n("bytes_written").map(bytes).getOrElse("")), n("bytes_written").getOrElse(-1L))}
        {cell(Text(n("task_ms").map(ms => f"${ms / 1000.0}%.1f").getOrElse("")), n("task_ms").getOrElse(-1L))}{cell(Text(n("elapsed_ms").map(duration).getOrElse("")), n("elapsed_ms").getOrElse(-1L))}
        <td></td>
      </tr>
    }
    val perTable = if (s.procedure != "maintain_warehouse") Nil else rs.groupBy(text(_, "table")).toSeq.filter(t => only.forall(_ == t._1)).sortBy(_._1).flatMap { case (t, tr) =>
      val r = StatementFigures.bytesRead(tr)
      val ms = tr.flatMap(long(_, "elapsed_ms")).sum
      val steps = tr.map(r => s"${text(r, "step")}: ${StatementFigures.outcome(r)}").mkString(", ")
      // the version its steps left: the one system.maintenance_history lists for them
      val version = tr.filter(r => text(r, "ran") == "true").flatMap(long(_, "version")).maxOption
      <tr class="lance-table-step small" data-id={s.id.toString}>
        {cell(Text(""), s.id)}{cell(Text(""), s.endedAt)}<td>↳ {steps}{version.map(v => s" (version $v)").getOrElse("")}</td><td>{t}</td><td></td>
        <td>{if (tr.exists(r => text(r, "error").nonEmpty)) "failed" else if (tr.exists(r => text(r, "ran") == "true")) "maintained" else "skipped"}</td>
        {cell(Text(r.map(bytes).getOrElse("")), r.getOrElse(-1L))}{cell(Text(""), 0)}{cell(Text(""), 0)}{cell(Text(duration(ms)), ms)}
        <td class="small text-danger">{tr.map(text(_, "error")).filter(_.nonEmpty).mkString("; ")}</td>
      </tr> +: versions(t)
    }
    val listed = if (s.procedure == "maintain_warehouse") rs.map(text(_, "table")).toSet else Set.empty[String]
    (main +: perTable) ++ costs.keys.toSeq.filterNot(listed).sorted.flatMap(versions)
  }
}
