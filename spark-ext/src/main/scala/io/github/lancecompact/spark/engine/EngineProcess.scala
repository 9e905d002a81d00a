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
import org.apache.spark.scheduler.{SparkListener, SparkListenerApplicationEnd}
import org.apache.spark.sql.SparkSession

/** The one long-lived Python engine process of this driver (`python -m lance_compact.engine`).
 *
 * It is started on first use, connects back over Py4J (a ClientServer on the loopback
 * address with a random secret), wraps this driver's SparkContext in a PySpark one and from
 * then on serves every procedure call: planning, the Spark jobs that rewrite on executors,
 * commits and reports happen there, with pylance imported once. It ends with the
 * SparkContext or the JVM (it also exits when its stdin, held by this JVM, closes).
 *
 * A caller waits for its answer as long as the engine is alive: it sends a heartbeat every
 * few seconds, and one silent for `spark.lance.compact.engine.heartbeatTimeout` (default
 * 60 s) is killed, failing the call; the next call starts a new engine. A caller interrupted
 * while waiting (Thrift's cancel, Spark Connect's interrupt) marks its request cancelled,
 * cancels the request's Spark jobs and waits a bounded time for the engine to stop.
 *
 * An engine whose memory stays over its ceiling (`spark.lance.compact.engine.memoryCeiling`,
 * runtime/memory.py) asks to be replaced: it is stopped once no call holds it and no request
 * waits for it, and a new one is started at once in the background ([[EngineProcess.call]]).
 */
final class EngineProcess private (val sc: SparkContext, python: String, logPath: Option[String])
  extends Logging {
  val bridge = new EngineBridge(sc)
  /** A silent engine (no heartbeat) is taken as hung after this long. */
  val heartbeatTimeoutMs: Long =
    math.max(1000L, sc.getConf.getTimeAsMs(EngineProcess.HeartbeatTimeoutConf, "60s"))
  bridge.heartbeatIntervalMs = math.max(200L, math.min(5000L, heartbeatTimeoutMs / 5))
  private val secret = {
    val bytes = new Array[Byte](32)
    new SecureRandom().nextBytes(bytes)
    bytes.map("%02x".format(_)).mkString
  }
  private val server = new py4j.ClientServer.ClientServerBuilder()
    .javaPort(0).javaAddress(InetAddress.getLoopbackAddress)
    .authToken(secret).entryPoint(bridge).autoStartJavaServer(false).build()
  /** The engine's own log: `spark.lance.compact.engine.log` if set (kept, appended to), else a
   * temporary file removed when the JVM exits. */
  val logFile: File = logPath.map(new File(_)).getOrElse {
    val f = Files.createTempFile("lance-compact-engine-", ".log").toFile
    f.deleteOnExit()
    f
  }
  private var process: Process = _
  /** Calls holding this engine now ([[EngineProcess.call]]; guarded by the object's lock). */
  private var leases = 0

  private def start(): Unit = {
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
    pb.redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(logFile))
    val started = System.nanoTime()
    process = pb.start()
    val p = process
    p.onExit().thenRun(() => {
      bridge.failAll(new IllegalStateException(
        s"the lance_compact engine process (pid ${p.pid()}, $python) exited with code ${p.exitValue()}; " +
          s"its Spark jobs were cancelled and the next call starts a new engine. Its log: $logFile${logTail()}"))
    })
    val deadline = started + EngineProcess.StartTimeoutMs * 1000000L
    while (!bridge.awaitReady(50)) {
      if (!process.isAlive || System.nanoTime() > deadline) {
        stop()
        throw new IllegalStateException(
          s"the lance_compact engine process ($python) did not start" +
            (if (process.isAlive) s" within ${EngineProcess.StartTimeoutMs / 1000} s" else
              s": it exited with code ${process.exitValue()}") + logTail())
      }
    }
    logInfo(s"lance_compact engine started in ${(System.nanoTime() - started) / 1000000} ms (log: $logFile)")
  }

  def alive: Boolean = process != null && process.isAlive && !sc.isStopped

  def stop(): Unit = {
    if (process != null) {
      process.destroy()
      if (!process.waitFor(5, java.util.concurrent.TimeUnit.SECONDS)) process.destroyForcibly()
    }
    server.shutdown()
  }

  /** It asked to be replaced and nothing uses it (called under the object's lock). */
  private def replaceable: Boolean = bridge.replaceRequested && leases == 0 && bridge.idle

  /** The engine's process id (-1 before it started). */
  def pid: Long = if (process == null) -1L else process.pid()

  /** Run one request in the engine and return its response JSON. Throws an
   * IllegalStateException when the engine dies, hangs, or does not stop after a cancel. */
  def call(action: String, requestJson: String): String = {
    val (id, response) = bridge.submit(action, requestJson)
    var cancelledAt = 0L
    try {
      while (true) {
        try return response.get(500, TimeUnit.MILLISECONDS)
        catch {
          case _: TimeoutException =>
            if (bridge.silentMs > heartbeatTimeoutMs) hung(action)
            if (cancelledAt != 0L && System.nanoTime() - cancelledAt > EngineProcess.CancelWaitMs * 1000000L)
              throw new IllegalStateException(
                s"$action was cancelled; the lance_compact engine (pid $pid) did not stop within " +
                  s"${EngineProcess.CancelWaitMs / 1000} s and stops at its next batch or commit (its log: $logFile)")
          case _: InterruptedException =>
            // The statement was cancelled (Thrift's cancel, Connect's interrupt): the engine
            // stops at its next check and answers saying so; wait for that answer.
            if (cancelledAt == 0L) {
              cancelledAt = System.nanoTime()
              bridge.cancel(id, "the statement was interrupted")
            }
        }
      }
      throw new IllegalStateException("unreachable")
    } catch {
      case e: ExecutionException => throw e.getCause
    } finally {
      if (cancelledAt != 0L) Thread.currentThread().interrupt()
    }
  }

  /** The engine sent no heartbeat for too long: kill it (its requests fail and their Spark
   * jobs are cancelled as it exits) and fail this call. */
  private def hung(action: String): Nothing = {
    val silent = bridge.silentMs
    val id = pid
    logWarning(s"lance_compact engine (pid $id) sent no heartbeat for $silent ms: killing it")
    if (process != null) {
      process.destroyForcibly()
      process.waitFor(10, TimeUnit.SECONDS)
    }
    throw new IllegalStateException(
      s"the lance_compact engine process (pid $id, $python) did not answer $action: it sent no " +
        s"heartbeat for ${silent / 1000} s (${EngineProcess.HeartbeatTimeoutConf} = " +
        s"${heartbeatTimeoutMs / 1000} s), so it was taken as hung and killed; the next call starts a " +
        s"new engine. Its log: $logFile${logTail()}")
  }

  private def logTail(): String = {
    val lines = try Files.readAllLines(logFile.toPath, StandardCharsets.UTF_8).asScala.takeRight(20)
    catch { case _: Exception => Nil }
    if (lines.isEmpty) "" else lines.mkString("; its log ends with:\n", "\n", "")
  }
}

object EngineProcess extends Logging {
  val StartTimeoutMs = 120000L
  val LogConf = "spark.lance.compact.engine.log"
  val HeartbeatTimeoutConf = "spark.lance.compact.engine.heartbeatTimeout"
  val CeilingConf = "spark.lance.compact.engine.memoryCeiling"
  /** How long an interrupted caller waits for the engine to stop and say what it committed. */
  val CancelWaitMs = 30000L
  private var current: Option[EngineProcess] = None

  /** The engine of the active session's SparkContext, started on first use. */
  def get(spark: SparkSession): EngineProcess = synchronized {
    val sc = spark.sparkContext
    // A thread may still hold a session of a stopped SparkContext as its active one (a warm-up
    // started by a catalog built there): it must never stop the live context's engine.
    if (sc.isStopped) throw new IllegalStateException("the session's SparkContext is stopped")
    current match {
      case Some(e) if (e.sc eq sc) && e.alive && !e.replaceable => e
      case previous =>
        previous.foreach(_.stop())
        val e = new EngineProcess(sc, pythonExec(spark), sc.getConf.getOption(LogConf).filter(_.nonEmpty))
        e.start()
        sc.addSparkListener(new SparkListener {
          override def onApplicationEnd(end: SparkListenerApplicationEnd): Unit = e.stop()
        })
        current = Some(e)
        e
    }
  }

  /** Run `action` on the engine of `spark`'s SparkContext (started on first use), holding it
   * for the call: an engine that asked to be replaced is stopped only when no call holds it,
   * and then a new one is started in the background for the next call. */
  def call(spark: SparkSession, action: String, requestJson: String): String = {
    val engine = synchronized {
      val e = get(spark)
      e.leases += 1
      e
    }
    try engine.call(action, requestJson)
    finally release(engine, spark)
  }

  private def release(engine: EngineProcess, spark: SparkSession): Unit = {
    val retire = synchronized {
      engine.leases -= 1
      val r = engine.replaceable && current.exists(_ eq engine)
      if (r) current = None
      r
    }
    if (retire) {
      logInfo(s"lance_compact engine (pid ${engine.pid}) is over its memory ceiling ($CeilingConf) and idle: " +
        "replacing it with a new one")
      // off the caller's thread: its statement has its answer and need not wait for the exit
      val stopping = new Thread(() => engine.stop(), "lance-compact-engine-stop")
      stopping.setDaemon(true)
      stopping.start()
      if (!engine.sc.isStopped) warmUp(spark)
    }
  }

  /** Start the engine ahead of the first call (in the background), so that call finds it
   * ready. Errors surface on the first call. */
  def warmUp(spark: SparkSession): Unit = {
    val t = new Thread(() => try get(spark) catch { case e: Exception => logDebug("engine warm-up", e) },
      "lance-compact-engine-start")
    t.setDaemon(true)
    t.start()
  }

  /** The Python of the engine and of the executors' workers: the driver's (static)
   * spark.sql.execution.pyspark.python, spark.pyspark.python, $PYSPARK_PYTHON, else python3.
   * Never the session's value: a SQL `SET` must not choose the program the driver starts. */
  def pythonExec(spark: SparkSession): String = {
    val conf = spark.sparkContext.getConf
    conf.getOption("spark.sql.execution.pyspark.python")
      .orElse(conf.getOption("spark.pyspark.python"))
      .orElse(sys.env.get("PYSPARK_PYTHON"))
      .getOrElse("python3")
  }

  sys.addShutdownHook(synchronized(current.foreach(_.stop())))
}
