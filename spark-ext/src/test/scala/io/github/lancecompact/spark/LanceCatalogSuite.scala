package io.github.lancecompact.spark

import java.nio.file.{Files, Path, Paths}

import scala.collection.mutable
import scala.sys.process._

import org.apache.spark.scheduler.{SparkListener, SparkListenerJobStart}
import org.apache.spark.sql.SparkSession
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/** The catalog in a real local Spark session; CALL runs the real Python engine
 * (bin/test exports PYSPARK_PYTHON, the project's venv python).
 */
class LanceCatalogSuite extends AnyFunSuite with BeforeAndAfterAll {
  private val warehouse: Path = Files.createTempDirectory("lance-wh")
  private var spark: SparkSession = _
  private val descriptions = mutable.ArrayBuffer.empty[(String, Option[String])]
  private val python = sys.env.getOrElse("PYSPARK_PYTHON", "python3")

  private def createTable(ns: String, name: String): Path = {
    val path = warehouse.resolve(ns).resolve(s"$name.lance")
    val cmd = Seq(python, "examples/degraded_table.py", "create", path.toString,
      "--fragments", "30", "--rows-per-fragment", "20", "--appends", "2", "--dim", "4")
    assert(cmd.! == 0, s"failed: ${cmd.mkString(" ")}")
    path
  }

  override def beforeAll(): Unit = {
    createTable("db", "events")
    Files.createDirectories(warehouse.resolve("staging"))
    spark = SparkSession.builder().master("local[2]").appName("LanceCatalogSuite")
      .config("spark.ui.enabled", "false")
      .config("spark.sql.warehouse.dir", Files.createTempDirectory("spark-wh").toString)
      .config("spark.sql.catalog.lance", "io.github.lancecompact.spark.catalog.LanceCatalog")
      .config("spark.sql.catalog.lance.warehouse", warehouse.toString)
      .config("spark.sql.execution.pyspark.python", python)
      // Every rewrite as a Spark job, as on a cluster (local mode rewrites small batches in the
      // engine itself: tests/test_engine_rewrite.py)
      .config("spark.lance.compact.engineRewrite.maxBatchBytes", "0")
      .getOrCreate()
    spark.sparkContext.addSparkListener(new SparkListener {
      override def onJobStart(e: SparkListenerJobStart): Unit = descriptions.synchronized {
        Option(e.properties.getProperty("spark.job.description")).foreach(
          d => descriptions += d -> Option(e.properties.getProperty("spark.jobGroup.id")))
      }
    })
  }

  override def afterAll(): Unit = if (spark != null) spark.stop()

  private def strings(sql: String): Seq[String] = spark.sql(sql).collect().map(_.toString).toSeq

  test("namespaces are folders, tables are <name>.lance datasets") {
    assert(spark.sql("SHOW NAMESPACES IN lance").collect().map(_.getString(0)).toSeq == Seq("db", "staging"))
    assert(spark.sql("SHOW TABLES IN lance.db").collect().map(_.getString(1)).toSeq == Seq("events"))
    assert(spark.sql("SHOW TABLES IN lance.staging").collect().isEmpty)
    spark.sql("CREATE NAMESPACE lance.scratch")
    assert(Files.isDirectory(warehouse.resolve("scratch")))
    spark.sql("DROP NAMESPACE lance.scratch")
    assert(!Files.exists(warehouse.resolve("scratch")))
    val e = intercept[Exception](spark.sql("SHOW TABLES IN lance.nope").collect())
    assert(e.getMessage.contains("SCHEMA_NOT_FOUND"))
  }

  test("the catalog does not create or drop tables") {
    val e = intercept[Exception](spark.sql("CREATE TABLE lance.db.t (id BIGINT)").collect())
    assert(e.getMessage.contains("write Lance datasets with Lance"))
    intercept[Exception](spark.sql("DROP TABLE lance.db.events").collect())
    assert(Files.isDirectory(warehouse.resolve("db").resolve("events.lance")))
  }

  test("procedures are listed and described") {
    val procedures = spark.sql("SHOW PROCEDURES IN lance").collect().map(_.getString(3)).toSeq
    assert(procedures == Seq("cleanup", "compact", "create_index", "describe_layout", "drop_index", "maintain",
      "maintain_warehouse", "optimize_indices", "plan_compaction"))
    assert(strings("DESCRIBE PROCEDURE lance.maintain_warehouse").mkString("\n").contains("namespace STRING, dry_run BOOLEAN"))
    val described = strings("DESCRIBE PROCEDURE lance.compact").mkString("\n")
    assert(described.contains("target_rows_per_fragment"))
    assert(described.contains("materialize_deletions_threshold"))
  }

  test("CALL compacts in one Spark job named for the table, the phase and the task count, in the caller's job group") {
    descriptions.synchronized(descriptions.clear())
    spark.sparkContext.setJobGroup("the-callers-group", "a statement")
    val row = try spark.sql("CALL lance.compact(table => 'db.events', target_rows_per_fragment => 200)").collect().head
      finally spark.sparkContext.clearJobGroup()
    assert(row.getAs[String]("table") == "db.events")
    assert(row.getAs[Long]("tasks") >= 2)
    assert(row.getAs[Long]("new_version") > row.getAs[Long]("read_version"))
    // Planning and committing run in the driver's engine; the rewrite is the only job, in the
    // caller's job group (what lets a cancel of the statement reach it: the cancels themselves
    // are tested in tests/test_cancel.py, with real cancelled jobs).
    val seen = descriptions.synchronized(descriptions.toList).filter(_._1.startsWith("lance.compact"))
    assert(seen == List(s"lance.compact db.events: rewriting ${row.getAs[Long]("tasks")} tasks planned at " +
      s"version ${row.getAs[Long]("read_version")} (batch 1)" -> Some("the-callers-group")), seen)
    // The caller's own description is untouched.
    assert(spark.sparkContext.getLocalProperty("spark.job.description") == null)
  }

  test("CALL through the system namespace with positional arguments; a no-op keeps the version") {
    val first = spark.sql("CALL lance.system.compact('db.events', 200)").collect().head
    assert(first.getAs[Long]("tasks") == 0)
    assert(first.getAs[Long]("new_version") == first.getAs[Long]("read_version"))
  }

  test("engine errors arrive with the engine's message, their error condition and SQLSTATE") {
    val e = intercept[org.apache.spark.sql.AnalysisException](spark.sql(
      "CALL lance.compact(table => 'db.events', options => map('bogus', '1'))").collect())
    assert(e.getMessage.startsWith("[LANCE_INVALID_ARGUMENT] table db.events: unknown options map key 'bogus'"), e.getMessage)
    assert(e.getCondition == "LANCE_INVALID_ARGUMENT" && e.getSqlState == "22023")
    val typo = intercept[org.apache.spark.sql.AnalysisException](spark.sql(
      "CALL lance.compact(table => 'db.events', options => map('target_row_per_fragment', '1'))").collect())
    assert(typo.getMessage.contains("'target_row_per_fragment' (did you mean 'target_rows_per_fragment'?)"), typo.getMessage)
  }

  test("a streaming query maintains a table from its foreachBatch every N batches") {
    import org.apache.spark.sql.execution.streaming.runtime.MemoryStream
    import io.github.lancecompact.spark.streaming.LanceMaintenance
    createTable("db", "streamed")
    val session = spark
    implicit val ctx: org.apache.spark.sql.SQLContext = session.sqlContext
    import session.implicits._
    val input = MemoryStream[Int]
    val seen = mutable.ArrayBuffer.empty[(Long, Seq[String])]
    val sink = LanceMaintenance.withMaintenance("db.streamed", every = 2,
      params = Map("target_rows_per_fragment" -> 300L, "older_than" -> "30 days"),
      onResult = (id, rows) => seen.synchronized(seen += id -> rows.map(r => s"${r.getAs[String]("step")}:${r.getAs[Boolean]("ran")}"))) {
      (_, _) => () // the query's own write goes here
    }
    val query = input.toDF().writeStream.foreachBatch(sink).start()
    try {
      (1 to 3).foreach { i => input.addData(i); query.processAllAvailable() }
    } finally query.stop()
    // batches 1 and 3 ran maintenance; the first compacted the degraded table, the second found nothing due
    assert(seen.map(_._2) == Seq(Seq("compact:true", "optimize_indices:false", "cleanup:false"),
      Seq("compact:false", "optimize_indices:false", "cleanup:false")), seen)
  }
}
