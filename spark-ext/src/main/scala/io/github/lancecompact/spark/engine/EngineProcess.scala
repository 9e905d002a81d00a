package io.github.lancecompact.spark.engine

import java.io.File
import java.net.InetAddress
import java.nio.charset.StandardCharsets
import java.nio.file.Files
import java.security.SecureRandom
import java.util.concurrent.{ExecutionException, TimeUnit, TimeoutException}

import scala.jdk.CollectionConverters._

import org.apache.spark.SparkContext
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession

/** A failure of the engine itself (not of the statement's work), with the kind the caller is
 * told: a worker that died or hung ([[LanceCompactException.WorkerLost]]), a cancel that ended
 * in killing the worker ([[LanceCompactException.Cancelled]]). */
final class EngineFailure(message: String, val kind: LanceCompactException.Kind,
                          /** The request its worker ended before answering, if that is what failed it. */
                          val ended: Option[EngineBridge.Ended] = None) extends IllegalStateException(message)

/** One engine worker: a Python process (`python -m lance_compact.engine`) of this driver's pool
 * ([[EnginePool]]), which serves one statement at a time.
 *
 * It is started by the pool, connects back over Py4J (a ClientServer on the loopback address
 * with a random secret), wraps this driver's SparkContext in a PySpark one and from then on
 * serves the requests the pool hands it: planning, the Spark jobs that rewrite on executors,
 * commits and reports, with pylance imported once. It ends when the pool stops it, with the
 * SparkContext or the JVM (it also exits when its stdin, held by this JVM, closes).
 *
 * A caller waits for its answer as long as the worker is alive: it sends a heartbeat every few
 * seconds, and one silent for `spark.lance.compact.engine.heartbeatTimeout` (default 60 s) is
 * killed, failing the call. A cancelled statement (its thread interrupted: Thrift's cancel,
 * Connect's interrupt; or its job group, tags or all jobs cancelled: CancelWatch) is marked
 * cancelled; the worker stops at its next check and says so. One that has not answered within
 * the grace period (`spark.lance.compact.engine.cancelGrace`) is killed, which commits nothing:
 * every commit goes through the bridge's gate ([[EngineBridge.beginCommit]]), refused once a
 * cancel is recorded, and a worker is never killed for a cancel while a commit begun before it
 * is under way.
 */
final class EngineProcess private[engine] (val sc: SparkContext, python: String, val logFile: File,
                                           val number: Int) extends Logging {
  val bridge = new EngineBridge(sc)
  /** A silent engine (no heartbeat) is taken as hung after this long. */
  val heartbeatTimeoutMs: Long =
    math.max(1000L, sc.getConf.getTimeAsMs(EngineProcess.HeartbeatTimeoutConf, "60s"))
  /** How long a cancelled statement's worker has to answer before it is killed. */
  val cancelGraceMs: Long = math.max(100L, sc.getConf.getTimeAsMs(EngineProcess.CancelGraceConf, "10s"))
  /** How long after a cancel a commit begun before it may still run before its worker is killed. */
  val commitWaitMs: Long = math.max(60000L, 6 * cancelGraceMs)
  bridge.heartbeatIntervalMs = math.max(200L, math.min(5000L, heartbeatTimeoutMs / 5))
  private val secret = {
    val bytes = new Array[Byte](32)
    new SecureRandom().nextBytes(bytes)
    bytes.map("%02x".format(_)).mkString
  }
  private val server = new py4j.ClientServer.ClientServerBuilder()
    .javaPort(0).javaAddress(InetAddress.getLoopbackAddress)
    .authToken(secret).entryPoint(bridge).autoStartJavaServer(false).build()
  @volatile private var process: Process = _
  /** Statements this worker served (the pool replaces it after `maxStatements`). */
  @volatile var served = 0
  /** The table location its last statement named ("" if none): a statement on that table
   * prefers this worker, whose Lance caches hold it. */
  @volatile var lastTable = ""
  /** The request this worker was killed for after a cancel (its caller hears "cancelled"). */
  @volatile private var killedForCancel: String = _
  /** Set when the pool stops it on purpose: its exit fails nothing anyone waits for. */
  @volatile private var stopping = false

  private[engine] def start(): Unit = {
    server.startServer(true)
    val pb = new ProcessBuilder(python, "-u", "-m", "lance_compact.engine")
    val env = pb.environment()
    env.put("PYSPARK_GATEWAY_PORT", server.getJavaServer.getListeningPort.toString)
    env.put("PYSPARK_GATEWAY_SECRET", secret)
    env.put("PYSPARK_PIN_THREAD", "true")
    // Executors run the same Python as the engine: task JSON is not stable across pylance versions.
    env.put("PYSPARK_PYTHON", python)
    // Its errors that ask for a report name this file, where their tracebacks are (runtime/failures.py).
    env.put("LANCE_COMPACT_ENGINE_LOG", logFile.getAbsolutePath)
    // Only the pool's first worker starts the executors' Python workers ahead of time.
    env.put("LANCE_COMPACT_ENGINE_WORKER", number.toString)
    pb.redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(logFile))
    val started = System.nanoTime()
    process = pb.start()
    val p = process
    p.onExit().thenRun(() => bridge.failAll(ended => endedError(p, ended)))
    val deadline = started + EngineProcess.StartTimeoutMs * 1000000L
    while (!bridge.awaitReady(50)) {
      if (!process.isAlive || System.nanoTime() > deadline) {
        stop()
        val code = if (process.isAlive) None else Some(process.exitValue())
        // killed by a signal while it started (a kill, the out-of-memory killer): a death, not a
        // fault of its set-up; the pool starts another for the statement (EnginePool.lease)
        if (code.exists(c => c > 128 && c < 160)) throw new EngineFailure(
          s"the lance_compact engine worker being started (pid ${p.pid()}) was killed by signal ${code.get - 128} " +
            "before it was ready: nothing ran in it", LanceCompactException.WorkerLost)
        throw new EngineFailure(
          s"the lance_compact engine process ($python) did not start" +
            code.fold(s" within ${EngineProcess.StartTimeoutMs / 1000} s")(c => s": it exited with code $c") + logTail(),
          LanceCompactException.InternalError)
      }
    }
    logInfo(s"lance_compact engine worker $number started in ${(System.nanoTime() - started) / 1000000} ms " +
      s"(pid ${p.pid()}, log: $logFile)")
  }

  /** What the caller of a request this worker did not answer hears: a cancel that killed it, or
   * its death, with what was and was not committed. */
  private def endedError(p: Process, r: EngineBridge.Ended): Throwable = {
    val code = p.exitValue()
    val how = if (code > 128) s"killed by signal ${code - 128}" + (if (code == 137) " (SIGKILL: e.g. the system's out-of-memory killer, or a kill)" else "")
      else s"exited with code $code"
    val before = if (r.landed.isEmpty) "" else s"; before that it committed ${EngineProcess.landedText(r.landed)}"
    val files = if (r.staged.isEmpty) "" else
      s"; the files it wrote and had not committed (under ${r.staged.keys.map(io.github.lancecompact.spark.catalog.Names.show).mkString(", ")}) are being removed"
    if (killedForCancel == r.id) new EngineFailure(r.committing match {
      case Some(what) => s"${r.action} was cancelled while committing ($what, begun before the cancel); that commit " +
        s"had not ended ${commitWaitMs / 1000} s later, so its engine worker (pid ${p.pid()}) was killed: that commit " +
        s"may or may not have landed (a Lance commit lands whole or not at all), see the table's versions$before$files"
      case None => s"${r.action} was cancelled; its engine worker (pid ${p.pid()}) did not stop within " +
        s"${cancelGraceMs / 1000.0} s (${EngineProcess.CancelGraceConf}) and was killed: nothing was committed after " +
        s"the cancel$before$files"
    }, LanceCompactException.Cancelled, Some(r))
    else if (stopping) new EngineFailure(s"${r.action} was cancelled: the session or the JVM ended while it ran (a " +
      s"Ctrl-C of spark-sql -e, SparkContext.stop), and its engine worker (pid ${p.pid()}) was stopped with it; " +
      s"nothing was committed after that$before$files", LanceCompactException.Cancelled, Some(r))
    else {
      val commit = r.committing match {
        case Some(what) => s"it died while committing ($what): that commit may or may not have landed, see the table's " +
          "versions (a Lance commit lands whole or not at all)"
        case None => "it was not committing: nothing was committed by it" + (if (r.landed.isEmpty) "" else " after its last commit")
      }
      new EngineFailure(
        s"the lance_compact engine worker running ${r.action} (pid ${p.pid()}, $python) died ($how); $commit$before$files; " +
          "its Spark jobs were cancelled and the statement's next run gets another worker. " +
          s"Its log: $logFile${logTail()}", LanceCompactException.WorkerLost, Some(r))
    }
  }

  def alive: Boolean = process != null && process.isAlive && !sc.isStopped

  /** Stop the process (its requests fail as stopped) and its Py4J server. */
  def stop(): Unit = {
    stopping = true
    if (process != null) {
      process.destroy()
      if (!process.waitFor(5, java.util.concurrent.TimeUnit.SECONDS)) process.destroyForcibly()
    }
    server.shutdown()
  }

  /** It asked to be replaced (its memory over its ceiling, runtime/memory.py). */
  def overCeiling: Boolean = bridge.replaceRequested

  /** The engine's process id (-1 before it started). */
  def pid: Long = if (process == null) -1L else process.pid()

  /** Run one request in this worker and return its response JSON. Throws an [[EngineFailure]]
   * when the worker dies, hangs, or is killed after a cancel it did not honour in time.
   * `submitted(id)` is called once the request is queued for the engine and watched. (Two
   * methods, not a default argument: Py4J callers, tests among them, see only real methods.) */
  def call(action: String, requestJson: String): String = call(action, requestJson, _ => ())

  def call(action: String, requestJson: String, submitted: String => Unit): String = {
    val (id, response) = bridge.submit(action, requestJson)
    submitted(id)  // from here the request's own watch sees its cancels (EnginePool: those before)
    var interrupted = false
    try {
      while (true) {
        try return response.get(200, TimeUnit.MILLISECONDS)
        catch {
          case _: TimeoutException =>
            if (bridge.silentMs > heartbeatTimeoutMs) hung(action)
            val at = bridge.cancelledAt(id)
            // Not during a commit begun before the cancel (that commit's outcome is the answer),
            // unless that commit has not ended long after the cancel (a store that never answers).
            val since = System.nanoTime() - at
            if (at != 0L && since > cancelGraceMs * 1000000L &&
              (bridge.committing(id) == null || since > commitWaitMs * 1000000L))
              killForCancel(id)
          case _: InterruptedException =>
            // The statement was cancelled (Thrift's cancel, Connect's interrupt): the engine
            // stops at its next check and answers saying so; wait for that answer (or the kill).
            if (!interrupted) {
              interrupted = true
              bridge.cancel(id, "the statement was interrupted")
            }
        }
      }
      throw new IllegalStateException("unreachable")
    } catch {
      case e: ExecutionException => throw e.getCause
    } finally {
      if (interrupted) Thread.currentThread().interrupt()
    }
  }

  private def killForCancel(id: String): Unit = {
    if (killedForCancel == id) return
    killedForCancel = id
    logWarning(s"lance_compact engine worker (pid $pid) did not stop within $cancelGraceMs ms of a cancel: killing it")
    if (process != null) process.destroyForcibly()
  }

  /** The engine sent no heartbeat for too long: kill it (its requests fail and their Spark
   * jobs are cancelled as it exits) and fail this call. */
  private def hung(action: String): Nothing = {
    val silent = bridge.silentMs
    val id = pid
    logWarning(s"lance_compact engine (pid $id) sent no heartbeat for $silent ms: killing it")
    stopping = true
    if (process != null) {
      process.destroyForcibly()
      process.waitFor(10, TimeUnit.SECONDS)
    }
    throw new EngineFailure(
      s"the lance_compact engine process (pid $id, $python) did not answer $action: it sent no " +
        s"heartbeat for ${silent / 1000} s (${EngineProcess.HeartbeatTimeoutConf} = " +
        s"${heartbeatTimeoutMs / 1000} s), so it was taken as hung and killed; the statement's next run " +
        s"gets another worker. Its log: $logFile${logTail()}", LanceCompactException.WorkerLost)
  }

  private def logTail(): String = {
    val lines = try Files.readAllLines(logFile.toPath, StandardCharsets.UTF_8).asScala.takeRight(20)
    catch { case _: Exception => Nil }
    if (lines.isEmpty) "" else lines.mkString("; its log ends with:\n", "\n", "")
  }
}

object EngineProcess {
  /** What a statement's commits landed, as one phrase: "version 5", "versions 5 and 7",
   * "versions 5, 7 and 9" (each commit says "version N" or "versions N, M"); other texts joined
   * as they are. */
  private[engine] def landedText(landed: Seq[String]): String = {
    val Versions = """versions? (\d+(?:, \d+)*)""".r
    val numbers = landed.map {
      case Versions(list) => Some(list.split(", ").toSeq)
      case _ => None
    }
    if (landed.isEmpty || numbers.contains(None)) landed.mkString(", ")
    else numbers.flatten.flatten match {
      case Seq(one) => s"version $one"
      case all => s"versions ${all.init.mkString(", ")} and ${all.last}"
    }
  }

  val StartTimeoutMs = 120000L
  val LogConf = "spark.lance.compact.engine.log"
  val HeartbeatTimeoutConf = "spark.lance.compact.engine.heartbeatTimeout"
  val CeilingConf = "spark.lance.compact.engine.memoryCeiling"
  val CancelGraceConf = "spark.lance.compact.engine.cancelGrace"

  /** The worker that served the last statement of `spark`'s pool (for tests and diagnostics). */
  def get(spark: SparkSession): EngineProcess = EnginePool.of(spark).any()

  /** Start the pool's workers ahead of the first call (in the background). */
  def warmUp(spark: SparkSession): Unit = EnginePool.warmUp(spark)

  /** The Python of the engine and of the executors' workers: the driver's (static)
   * spark.sql.execution.pyspark.python, spark.pyspark.python, $PYSPARK_PYTHON, else python3.
   * Never the session's value: a SQL `SET` must not choose the program the driver starts. */
  def pythonExec(spark: SparkSession): String = pythonExec(spark.sparkContext)

  def pythonExec(sc: SparkContext): String = {
    val conf = sc.getConf
    conf.getOption("spark.sql.execution.pyspark.python")
      .orElse(conf.getOption("spark.pyspark.python"))
      .orElse(sys.env.get("PYSPARK_PYTHON"))
      .getOrElse("python3")
  }
}
