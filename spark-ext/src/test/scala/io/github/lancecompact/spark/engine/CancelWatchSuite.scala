package io.github.lancecompact.spark.engine

import java.util.concurrent.{ConcurrentHashMap, TimeUnit}

import org.apache.spark.{SparkConf, SparkContext}
import org.apache.spark.scheduler.LanceCompactCancelEvents
import org.scalatest.funsuite.AnyFunSuite

/** The cancel watch sees a cancel of a statement's job group, tag or all jobs sent while no job
 * runs at all, with no job of its own; Spark's jobs and cancels work as before through the
 * observed scheduler. */
class CancelWatchSuite extends AnyFunSuite {
  test("group, tag and all-jobs cancels are seen with no job active, and no job is started") {
    val sc = new SparkContext(new SparkConf().setMaster("local[1]").setAppName("watch")
      .set("spark.ui.enabled", "false"))
    try {
      val seen = new ConcurrentHashMap[String, String]()
      val watch = new CancelWatch(sc, (id, why) => seen.put(id, why))
      sc.addSparkListener(watch)
      assert(watch.observing && LanceCompactCancelEvents.installed(sc))
      watch.watch("1", "req-1", Map("spark.jobGroup.id" -> "g1"))
      watch.watch("2", "req-2", Map("spark.job.tags" -> "user-tag,other"))
      watch.watch("3", "req-3", Map("spark.jobGroup.id" -> "g3"))
      sc.cancelJobGroup("elsewhere")
      sc.cancelJobsWithTag("not-ours")
      assert(seen.isEmpty)
      sc.cancelJobGroup("g1")
      assert(seen.get("1").contains("part of cancelled job group g1"), seen)
      sc.cancelJobsWithTag("user-tag", "stopped by the test")
      assert(seen.get("2").contains("stopped by the test"), seen)
      assert(!seen.containsKey("3"))
      watch.unwatch("1")
      sc.cancelAllJobs()
      assert(seen.get("3").contains("cancellation of all jobs"), seen)
      // no job was started to see them, and jobs run as before through the observed loop
      assert(sc.statusTracker.getJobIdsForGroup(null).isEmpty)
      assert(sc.parallelize(1 to 100, 3).map(_ * 2).reduce(_ + _) == 10100)
      // a job of a watched request cancelled in another form (a UI kill) cancels its statement
      watch.watch("4", "req-4", Map.empty)
      sc.setLocalProperty("spark.job.tags", "req-4")
      val job = sc.parallelize(1 to 2, 1).map { x => Thread.sleep(30000); x }.countAsync()
      sc.setLocalProperty("spark.job.tags", null)
      val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30)
      while (sc.statusTracker.getActiveJobIds().isEmpty && System.nanoTime() < deadline) Thread.sleep(20)
      sc.cancelJob(sc.statusTracker.getActiveJobIds().head, "killed via the Web UI")
      while (!seen.containsKey("4") && System.nanoTime() < deadline) Thread.sleep(20)
      assert(seen.get("4").contains("killed via the Web UI"), seen)
      assert(job.isCompleted || { Thread.sleep(200); job.isCompleted })
      watch.stop()
      sc.cancelAllJobs()
      assert(seen.size == 4)
    } finally sc.stop()
  }

  test("a remembering watch takes a cancel sent after the statement began, before it was watched") {
    val sc = new SparkContext(new SparkConf().setMaster("local[1]").setAppName("remember")
      .set("spark.ui.enabled", "false"))
    try {
      val seen = new ConcurrentHashMap[String, String]()
      val watch = new CancelWatch(sc, (id, why) => seen.put(id, why), remember = true)
      assert(watch.observing)
      val before = System.currentTimeMillis()
      Thread.sleep(5)
      sc.cancelJobGroup("early")  // the statement is being parsed: no job, not watched yet
      sc.cancelJobsWithTag("early-tag")
      Thread.sleep(5)
      val after = System.currentTimeMillis()
      watch.watch("began-before", "r1", Map("spark.jobGroup.id" -> "early"), since = before)
      assert(seen.get("began-before").contains("part of cancelled job group early"), seen)
      watch.watch("by-tag", "r2", Map("spark.job.tags" -> "early-tag"), since = before)
      assert(seen.containsKey("by-tag"), seen)
      // a statement that began after the cancel (the same group reused), or of another group: not cancelled
      watch.watch("began-after", "r3", Map("spark.jobGroup.id" -> "early"), since = after)
      watch.watch("other-group", "r4", Map("spark.jobGroup.id" -> "other"), since = before)
      watch.watch("no-start", "r5", Map("spark.jobGroup.id" -> "early"))
      assert(!seen.containsKey("began-after") && !seen.containsKey("other-group") && !seen.containsKey("no-start"), seen)
      // a watch that does not remember (a worker's) keeps nothing
      val plain = new CancelWatch(sc, (id, why) => seen.put(id, why))
      assert(plain.observing)
      sc.cancelJobGroup("late")
      plain.watch("plain", "r6", Map("spark.jobGroup.id" -> "late"), since = before)
      assert(!seen.containsKey("plain"), seen)
      watch.stop()
      plain.stop()
    } finally sc.stop()
  }
}
