package io.github.lancecompact.spark

import scala.jdk.CollectionConverters._

import org.apache.spark.SparkConf
import org.apache.spark.sql.util.CaseInsensitiveStringMap
import org.scalatest.funsuite.AnyFunSuite

import io.github.lancecompact.spark.catalog.{CatalogSettings, LanceCatalog}

class CatalogSettingsSuite extends AnyFunSuite {
  private val cls = classOf[LanceCatalog].getName
  private val operator = new SparkConf(false)
    .set("spark.sql.catalog.lance", cls)
    .set("spark.sql.catalog.lance.warehouse", "s3://op/wh")
    .set("spark.sql.catalog.lance.storage.aws_access_key_id", "AKIAOP")
    .set("spark.sql.catalog.lance.storage.aws_secret_access_key", "opsecret")
    .set("spark.sql.catalog.mine.storage.aws_access_key_id", "AKIAOP")

  private def session(name: String, extra: (String, String)*): CaseInsensitiveStringMap = {
    val fromStatic = operator.getAllWithPrefix(s"spark.sql.catalog.$name.").toMap
    new CaseInsensitiveStringMap((fromStatic ++ extra).asJava)
  }

  private def resolve(name: String, extra: (String, String)*) =
    CatalogSettings.resolve(name, session(name, extra: _*), Some(operator), cls)

  test("the operator's catalog takes the static settings") {
    val o = resolve("lance")
    assert(o.get("warehouse") == "s3://op/wh" && o.get("storage.aws_access_key_id") == "AKIAOP")
    assert(resolve("lance", "warehouse" -> "s3://op/wh").get("warehouse") == "s3://op/wh")
  }

  test("a session value of a key the catalog reads is refused, naming the key") {
    for ((k, v) <- Seq("warehouse" -> "/elsewhere", "WAREHOUSE" -> "/elsewhere", "storage.aws_endpoint" -> "http://x",
      "storage.AWS_ENDPOINT" -> "http://x", "impl" -> "dir", "root" -> "/x", "single_level_ns" -> "true",
      "read_max_rows" -> "1", "distributed_reads" -> "false", "maintain.enabled" -> "false")) {
      val e = intercept[IllegalArgumentException](resolve("lance", k -> v))
      assert(e.getMessage.contains(s"catalog lance: spark.sql.catalog.lance.$k is set by the operator and cannot be changed in a session"), e.getMessage)
    }
  }

  test("keys the catalog does not read are not applied and not refused") {
    assert(resolve("lance", "strategies.x" -> "m.C").get("strategies.x") == null)
  }

  test("a user's own catalog gets no static value and signs with no credential but its own") {
    val o = CatalogSettings.resolve("mine", session("mine", "warehouse" -> "s3://op/wh", "storage.aws_endpoint" -> "http://x"),
      Some(operator), cls)
    assert(o.get("storage.aws_access_key_id") == null && o.get("warehouse") == "s3://op/wh")
    assert(o.get("storage.aws_skip_signature") == "1" && o.get("storage.azure_skip_signature") == "1")
    val own = CatalogSettings.resolve("mine", session("mine", "storage.aws_access_key_id" -> "AKIAUSER",
      "storage.aws_secret_access_key" -> "s", "storage.AWS_SKIP_SIGNATURE" -> "false"), Some(operator), cls)
    assert(own.get("storage.aws_access_key_id") == "AKIAUSER" && own.get("storage.aws_skip_signature") == "false")
    val forced = CatalogSettings.resolve("mine", session("mine", "storage.AWS_SKIP_SIGNATURE" -> "false"), Some(operator), cls)
    assert(forced.get("storage.aws_skip_signature") == "1")
  }

  test("outside a Spark driver the options are taken as given") {
    val o = new CaseInsensitiveStringMap(Map("warehouse" -> "/x").asJava)
    assert(CatalogSettings.resolve("lance", o, None, cls).get("warehouse") == "/x")
  }
}
