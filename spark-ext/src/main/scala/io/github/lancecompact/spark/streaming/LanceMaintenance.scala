package io.github.lancecompact.spark.streaming

import scala.jdk.CollectionConverters._

import org.apache.spark.internal.Logging
import org.apache.spark.sql.{DataFrame, Row}

/** Table maintenance from a Structured Streaming query (the Scala side of
 * `lance_compact.streaming.with_maintenance`): wrap the query's `foreachBatch` function;
 * every `every` micro-batches (and on the first) it runs `CALL <catalog>.maintain` on the
 * batch's session after the write, with the given parameters (`max_rewrite_bytes` bounds the
 * compaction). A failed maintenance is logged and the stream goes on.
 * {{{
 * stream.writeStream.foreachBatch(LanceMaintenance.withMaintenance("db.events", every = 20,
 *   params = Map("max_rewrite_bytes" -> (256L << 20), "older_than" -> java.time.Duration.ofDays(8))) { (batch, id) =>
 *   ... the query's own write ...
 * }).start()
 * }}}
 */
object LanceMaintenance extends Logging {
  def withMaintenance(table: String, every: Int, params: Map[String, Any] = Map.empty,
                      catalog: String = "lance", onResult: (Long, Seq[Row]) => Unit = (_, _) => ())
                     (write: (DataFrame, Long) => Unit): (DataFrame, Long) => Unit = {
    require(every >= 1, s"every must be >= 1, got $every")
    var batches = 0L
    (batch: DataFrame, batchId: Long) => {
      write(batch, batchId)
      batches += 1
      if ((batches - 1) % every == 0) {
        val named = ("table" +: params.keys.toSeq).map(k => s"$k => :$k").mkString(", ")
        val args: Map[String, Any] = params + ("table" -> table)
        try {
          val rows = batch.sparkSession.sql(s"CALL $catalog.maintain($named)", args).collect().toSeq
          logInfo(s"maintenance of $table after batch $batchId: " +
            rows.map(r => s"${r.getAs[String]("step")}=${if (r.getAs[Boolean]("ran")) "ran" else "skipped"}").mkString(", "))
          onResult(batchId, rows)
        } catch {
          case e: Exception => logWarning(s"maintenance of $table after batch $batchId failed: ${e.getMessage.linesIterator.next()}")
        }
      }
    }
  }

  /** The same for every table of the warehouse (or of `namespace`): `CALL <catalog>.maintain_warehouse`
   * every `every` micro-batches, with `params` (bound each round with `max_duration`, `max_tables`
   * or `max_total_rewrite_bytes`). */
  def withWarehouseMaintenance(every: Int, namespace: Option[String] = None, params: Map[String, Any] = Map.empty,
                               catalog: String = "lance", onResult: (Long, Seq[Row]) => Unit = (_, _) => ())
                              (write: (DataFrame, Long) => Unit): (DataFrame, Long) => Unit = {
    require(every >= 1, s"every must be >= 1, got $every")
    val what = namespace.map(n => s"namespace $n").getOrElse("the warehouse")
    var batches = 0L
    (batch: DataFrame, batchId: Long) => {
      write(batch, batchId)
      batches += 1
      if ((batches - 1) % every == 0) {
        val args: Map[String, Any] = params ++ namespace.map("namespace" -> _)
        val named = args.keys.toSeq.sorted.map(k => s"$k => :$k").mkString(", ")
        try {
          val rows = batch.sparkSession.sql(s"CALL $catalog.maintain_warehouse($named)", args).collect().toSeq
          logInfo(s"maintenance of $what after batch $batchId: " +
            s"${rows.filter(_.getAs[Boolean]("ran")).map(_.getAs[String]("table")).distinct.size} tables maintained")
          onResult(batchId, rows)
        } catch {
          case e: Exception => logWarning(s"maintenance of $what after batch $batchId failed: ${e.getMessage.linesIterator.next()}")
        }
      }
    }
  }
}
