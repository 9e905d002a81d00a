package io.github.lancecompact.spark.ui

import scala.jdk.CollectionConverters._

import org.apache.spark.{LanceCompactUiBus, SparkConf, SparkContext}
import org.apache.spark.util.kvstore.InMemoryStore
import org.scalatest.funsuite.AnyFunSuite

/** The Lance tab's listener over a real SparkContext's bus and Spark's own in-memory store: a
 * statement's tasks are its tagged jobs' (no other job's), a table's health row is its last
 * evaluation's, and the store keeps a bounded number of ended statements and layouts. */
class LanceUiListenerSuite extends AnyFunSuite {
  private def eventually(what: => Boolean): Unit = {
    val deadline = System.nanoTime() + 30L * 1000000000L
    while (!what) { assert(System.nanoTime() < deadline, "timed out"); Thread.sleep(20) }
  }

  test("a statement's tasks and run time are those of its tagged jobs; health and retention") {
    val sc = new SparkContext(new SparkConf().setMaster("local[2]").setAppName("lance-ui")
      .set("spark.ui.enabled", "false"))
    try {
      val store = new InMemoryStore()
      sc.addSparkListener(new LanceUiListener(store, retainedStatements = 3, retainedLayouts = 2))
      def statement(id: Long) = store.read(classOf[LanceStatementRecord], id)

      LanceCompactUiBus.post(sc, LanceStatementStarted(1, "req-1", "compact", "db.t", "alice", 1000L, 0L))
      sc.parallelize(1 to 10, 3).count()  // not the statement's: no tag
      sc.addJobTag("req-1")
      sc.parallelize(1 to 10, 4).map { x => Thread.sleep(30); x }.count()
      sc.removeJobTag("req-1")
      LanceCompactUiBus.post(sc, LanceStatementStep(1, "db.t: committing", 2000L))
      LanceCompactUiBus.post(sc, LanceStatementEnded(1, 3000L, "succeeded", "", """[{"table":"db.t","bytes_read":10}]"""))
      eventually(statement(1).outcome == "succeeded")
      val s = statement(1)
      assert(s.tasksAll == 4 && s.tasksDone == 4, s)
      assert(s.taskMs >= 4 * 25, s)
      assert(s.step == "db.t: committing" && s.user == "alice" && s.rowsJson.contains("bytes_read"))

      // the engine's figures: bytes so far, each maintenance version's cost, a layout
      LanceCompactUiBus.post(sc, LanceStatementStarted(7, "req-7", "compact", "db.v", "alice", 1000L, 0L))
      LanceCompactUiBus.post(sc, LanceEngineFigures(7, "lance", """{"kind":"progress","bytes_read":10,"bytes_written":8}""", 1100L))
      LanceCompactUiBus.post(sc, LanceEngineFigures(7, "lance", """{"kind":"cost","table":"db.v","version":4,"step":"compaction","bytes_read":10,"bytes_written":8,"task_ms":30,"elapsed_ms":50}""", 1200L))
      LanceCompactUiBus.post(sc, LanceEngineFigures(7, "lance", """{"kind":"layout","table":"db.v","row":{"version":4,"bins":[[3,2]]}}""", 1200L))
      LanceCompactUiBus.post(sc, LanceEngineFigures(7, "lance", """{"kind":"layout","table":"db.v","row":{"version":5,"bins":[[6,1]]}}""", 1200L))
      eventually(store.count(classOf[LanceLayoutRecord]) == 2)
      val v = statement(7)
      assert(v.bytesRead == 10 && v.bytesWritten == 8 && v.costsJson.contains("\"version\":4") && v.costsJson.contains("\"task_ms\":30"), v)
      // two layouts of one table in the same millisecond are both kept
      assert(store.view(classOf[LanceLayoutRecord]).asScala.toSeq.sortBy(_.at).map(r => (r.table, r.at)) == Seq(("db.v", 1200L), ("db.v", 1201L)))
      // out of the way of the retention checks below
      store.delete(classOf[LanceStatementRecord], 7L)
      store.view(classOf[LanceLayoutRecord]).asScala.toSeq.foreach(r => store.delete(classOf[LanceLayoutRecord], r.key))

      LanceCompactUiBus.post(sc, LanceHealthEvaluated("lance", 5000L,
        """[{"namespace":"db","table":"t","health_score":40},{"namespace":"db","table":"u","health_score":90}]"""))
      LanceCompactUiBus.post(sc, LanceHealthEvaluated("lance", 6000L, """[{"namespace":"db","table":"t","health_score":100}]"""))
      eventually(store.count(classOf[LanceTableHealthRecord]) == 2 &&
        store.read(classOf[LanceTableHealthRecord], "lance.db.t").evaluatedAt == 6000L)
      assert(store.read(classOf[LanceTableHealthRecord], "lance.db.t").rowJson.contains("100"))
      assert(store.read(classOf[LanceTableHealthRecord], "lance.db.u").evaluatedAt == 5000L)

      // statement 2 still runs: never dropped; of the ended ones the oldest go first
      LanceCompactUiBus.post(sc, LanceStatementStarted(2, "req-2", "maintain", "db.t", "bob", 1L, 0L))
      (3L to 6L).foreach { id =>
        LanceCompactUiBus.post(sc, LanceStatementStarted(id, s"req-$id", "cleanup", "db.t", "bob", id, 0L))
        LanceCompactUiBus.post(sc, LanceStatementEnded(id, id + 1, "succeeded", "", ""))
      }
      (1L to 3L).foreach(at => LanceCompactUiBus.post(sc, LanceLayoutDescribed("lance", "db.t", at, """[{"version":1}]""")))
      eventually(store.count(classOf[LanceLayoutRecord]) == 2 && store.view(classOf[LanceStatementRecord]).asScala.exists(_.id == 6))
      eventually(statement(6).outcome == "succeeded")
      assert(store.view(classOf[LanceStatementRecord]).asScala.map(_.id).toSeq.sorted == Seq(2L, 5L, 6L))
      assert(store.view(classOf[LanceLayoutRecord]).asScala.map(_.at).toSeq.sorted == Seq(2L, 3L))
    } finally sc.stop()
  }
}
