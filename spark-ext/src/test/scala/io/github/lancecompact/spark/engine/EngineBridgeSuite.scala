package io.github.lancecompact.spark.engine

import java.util.concurrent.{ExecutionException, TimeUnit}

import org.apache.spark.{SparkConf, SparkContext}
import org.scalatest.funsuite.AnyFunSuite

/** The heartbeat's list of served requests: a request the engine took and no longer lists is
 * failed at once; one still queued, or taken but not yet counted by the engine, never is. */
class EngineBridgeSuite extends AnyFunSuite {
  test("a request the engine took and no longer serves is failed, no other") {
    withContext("bridge") { sc =>
      val bridge = new EngineBridge(sc)
      val (first, lost) = bridge.submit("plan", "{}")
      val (_, queued) = bridge.submit("layout", "{}")
      assert(bridge.nextRequest(1000).contains(s""""id":"$first""""))
      bridge.heartbeat("0;") // taken by the JVM, not yet counted by the engine: still waited on
      bridge.heartbeat(s"1;$first")
      assert(!lost.isDone && !queued.isDone)
      bridge.heartbeat("1;") // counted and no longer served: failed
      val error = intercept[ExecutionException](lost.get(1, TimeUnit.SECONDS)).getCause
      assert(error.getMessage.contains("stopped serving plan without answering"))
      assert(!queued.isDone) // still in the queue: not the engine's yet
      bridge.heartbeat("garbage") // an unreadable report fails nothing
      assert(!queued.isDone)
    }
  }

  test("the commit gate: no commit begins once a cancel is recorded; a cancel during a commit waits for it") {
    withContext("gate") { sc =>
      val bridge = new EngineBridge(sc)
      val (a, _) = bridge.submit("compact", "{}")
      assert(bridge.beginCommit(a, "table t: commit of batch 1") == null) // not cancelled: it may commit
      assert(bridge.committing(a) == "table t: commit of batch 1")
      bridge.cancel(a, "the statement was interrupted") // during the commit: recorded, the commit goes on
      assert(bridge.cancelledAt(a) != 0L && bridge.committing(a) != null)
      bridge.endCommit(a, "version 7")
      assert(bridge.committing(a) == null && bridge.landed(a) == Seq("version 7"))
      // the next commit of the same statement is refused, with the cancel's reason
      assert(bridge.beginCommit(a, "table t: commit of batch 2") == "the statement was interrupted")
      assert(bridge.committing(a) == null)

      val (b, _) = bridge.submit("create_index", "{}")
      bridge.cancel(b, "its job group was cancelled")
      assert(bridge.beginCommit(b, "table u: index commit") == "its job group was cancelled")
      // a request the bridge does not hold (answered, or never submitted) never commits
      assert(bridge.beginCommit("no-such-request", "x") != null)
      // staged files: kept by table until the request clears them
      bridge.staged(b, "/w/u.lance", """["_indices/1"]""")
      assert(bridge.stagedOf(b) == Map("/w/u.lance" -> """["_indices/1"]"""))
      bridge.staged(b, "/w/u.lance", "[]")
      assert(bridge.stagedOf(b).isEmpty)
    }
  }

  private def withContext(app: String)(body: SparkContext => Unit): Unit = {
    val sc = new SparkContext(new SparkConf().setMaster("local[1]").setAppName(app).set("spark.ui.enabled", "false"))
    try body(sc) finally sc.stop()
  }
}
