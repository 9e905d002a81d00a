package io.github.lancecompact.spark.engine

import java.util.concurrent.{ExecutionException, TimeUnit}

import org.apache.spark.{SparkConf, SparkContext}
import org.scalatest.funsuite.AnyFunSuite

/** The heartbeat's list of served requests: a request the engine took and no longer lists is
 * failed at once; one still queued, or taken but not yet counted by the engine, never is. */
class EngineBridgeSuite extends AnyFunSuite {
  test("a request the engine took and no longer serves is failed, no other") {
    val sc = new SparkContext(new SparkConf().setMaster("local[1]").setAppName("bridge")
      .set("spark.ui.enabled", "false"))
    try {
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
    } finally sc.stop()
  }
}
