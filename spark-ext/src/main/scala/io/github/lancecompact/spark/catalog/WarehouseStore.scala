package io.github.lancecompact.spark.catalog

import java.nio.file.{Files, Path}

import scala.jdk.CollectionConverters._

import io.github.lancecompact.spark.engine.{EngineRequest, PythonEngine}

/** What the warehouse asks of the store it lives in: folders, by location. */
trait WarehouseStore {
  /** Names of the immediate child folders of `location`, sorted (none if it does not exist). */
  def folders(location: String): Seq[String]

  /** Whether `location` exists as a folder (on an object store: holds anything). */
  def exists(location: String): Boolean

  /** Make `location` an (empty) folder. */
  def create(location: String): Unit

  /** Remove the folder `location` if it is empty; false if it holds anything. */
  def dropEmpty(location: String): Boolean
}

/** A warehouse on local disk (or a mounted file system), through java.nio. */
object LocalStore extends WarehouseStore {
  private def path(location: String): Path =
    Warehouse.localPath(location).getOrElse(throw new IllegalArgumentException(s"$location is not a local path"))

  override def folders(location: String): Seq[String] = {
    val dir = path(location)
    if (!Files.isDirectory(dir)) Nil
    else {
      val stream = Files.list(dir)
      try stream.iterator().asScala.filter(p => Files.isDirectory(p)).map(_.getFileName.toString).toSeq.sorted
      finally stream.close()
    }
  }

  override def exists(location: String): Boolean = Files.isDirectory(path(location))

  override def create(location: String): Unit = Files.createDirectories(path(location))

  override def dropEmpty(location: String): Boolean = {
    val dir = path(location)
    val stream = Files.list(dir)
    val empty = try !stream.iterator().hasNext finally stream.close()
    if (empty) Files.delete(dir)
    empty
  }
}

/** A warehouse on an object store Lance reaches (s3://, gs://, az://, ...): listed and
 * written by the engine with Lance's own object store and the catalog's storage options
 * (python/lance_compact/warehouse.py), so every store Lance supports works alike.
 */
final class ObjectStore(storageOptions: Map[String, String], warehouse: Option[String] = None) extends WarehouseStore {
  private def call(op: String, location: String): Seq[(String, String)] =
    PythonEngine.warehouse(EngineRequest(uri = Some(location), storage = storageOptions, warehouse = warehouse)(_.put("op", op)))

  override def folders(location: String): Seq[String] =
    call("list", location).collect { case (name, "folder") => name }

  override def exists(location: String): Boolean = call("list", location).nonEmpty

  override def create(location: String): Unit = call("create", location)

  override def dropEmpty(location: String): Boolean =
    if (folders(location).nonEmpty) false else { call("drop", location); true }
}
