package io.github.lancecompact.spark.engine

import java.util.concurrent.ConcurrentHashMap

import com.codahale.metrics.{Gauge, MetricRegistry}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.types.StructType

/** What the procedures and `maintain_warehouse` did, for Spark's metrics system: a Dropwizard registry that
 * [[EnginePlugin]]'s driver plugin hangs under its own (`plugin.<EnginePlugin>.maintenance.*`),
 * so every configured sink (JMX, CSV, the Prometheus servlet) shows it:
 *
 *  - `maintenance.runs`, `.tables_maintained`, `.tables_failed`, `.bytes_rewritten` (counters)
 *  - `maintenance.table.<namespace.table>.health` (gauge: the latest score, 0-100),
 *    `.runs` and `.failures` (counters) per table;
 *  - for every procedure: `maintenance.procedure.<name>.calls` and `.failures` (counters) and
 *    `.duration` (a timer: count, rates, percentiles), from each CALL on this driver.
 *
 * Updated from each call's result rows (the engine's answer), on the driver. Without the
 * plugin the figures are kept and reported nowhere.
 */
object MaintenanceMetrics {
  val registry = new MetricRegistry()
  private val health = new ConcurrentHashMap[String, Integer]()
  // Made now: Spark registers a plugin's metrics source only if it holds metrics at start-up,
  // and the per-table ones come later.
  Seq("runs", "tables_maintained", "tables_failed", "bytes_rewritten").foreach(registry.counter)

  private def table(name: String, what: String): String = MetricRegistry.name("table", name, what)

  /** Record one call's rows (parameters.json's maintain_warehouse_columns). */
  def record(schema: StructType, rows: Array[InternalRow]): Unit = {
    def index(name: String) = schema.fieldIndex(name)
    val (tableCol, ranCol, errorCol) = (index("table"), index("ran"), index("error"))
    val (beforeCol, afterCol, bytesCol) = (index("health_before"), index("health_after"), index("bytes_rewritten"))
    registry.counter("runs").inc()
    rows.groupBy(_.getUTF8String(tableCol).toString).foreach { case (name, rs) =>
      val ran = rs.exists(r => !r.isNullAt(ranCol) && r.getBoolean(ranCol))
      val failed = rs.exists(r => !r.isNullAt(errorCol))
      val bytes = rs.map(r => if (r.isNullAt(bytesCol)) 0L else r.getLong(bytesCol)).sum
      val score = rs.collectFirst { case r if !r.isNullAt(afterCol) => r.getInt(afterCol) }
        .orElse(rs.collectFirst { case r if !r.isNullAt(beforeCol) => r.getInt(beforeCol) })
      score.foreach { s =>
        if (health.put(name, s) == null) {
          registry.gauge(table(name, "health"), () => new Gauge[Integer] { override def getValue: Integer = health.get(name) })
        }
      }
      if (ran) { registry.counter("tables_maintained").inc(); registry.counter(table(name, "runs")).inc() }
      if (failed) { registry.counter("tables_failed").inc(); registry.counter(table(name, "failures")).inc() }
      registry.counter("bytes_rewritten").inc(bytes)
    }
  }

  /** A CALL of `procedure` ended after `nanos`, `failed` or not (names: the procedures', a fixed set). */
  def called(procedure: String, nanos: Long, failed: Boolean): Unit = {
    def name(what: String) = MetricRegistry.name("procedure", procedure, what)
    registry.timer(name("duration")).update(nanos, java.util.concurrent.TimeUnit.NANOSECONDS)
    registry.counter(name("calls")).inc()
    val failures = registry.counter(name("failures"))  // made with the first call: a sink shows 0, not nothing
    if (failed) failures.inc()
  }

  /** A table's latest health score, if a run has seen it. */
  def healthOf(table: String): Option[Int] = Option(health.get(table)).map(_.intValue)
}
