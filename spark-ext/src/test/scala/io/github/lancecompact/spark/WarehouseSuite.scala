package io.github.lancecompact.spark

import java.nio.file.{Files, Path}

import org.apache.spark.sql.catalyst.analysis.{NoSuchNamespaceException, NoSuchTableException}
import org.apache.spark.sql.connector.catalog.Identifier
import org.scalatest.funsuite.AnyFunSuite

import io.github.lancecompact.spark.catalog.{Warehouse, WarehouseBoundary}

class WarehouseSuite extends AnyFunSuite {
  private def withWarehouse(body: (Path, Warehouse) => Unit): Unit = {
    val root = Files.createTempDirectory("wh")
    Files.createDirectories(root.resolve("db").resolve("events.lance").resolve("_versions"))
    body(root, new Warehouse("lance", Some(root.toString)))
  }

  private def message(f: => Any): String = intercept[Exception](f).getMessage

  test("identifiers map to <warehouse>/<namespace...>/<name>.lance") {
    withWarehouse { (root, wh) =>
      assert(wh.tableLocation(Identifier.of(Array("db"), "events")) == s"$root/db/events.lance")
      assert(wh.tableLocation(Identifier.of(Array("a", "b"), "t")) == s"$root/a/b/t.lance")
      assert(wh.requireTable(Identifier.of(Array("db"), "events")) == s"$root/db/events.lance")
    }
  }

  test("missing namespaces and tables raise Spark's own errors") {
    withWarehouse { (_, wh) =>
      intercept[NoSuchNamespaceException](wh.requireTable(Identifier.of(Array("nope"), "events")))
      intercept[NoSuchTableException](wh.requireTable(Identifier.of(Array("db"), "nope")))
    }
  }

  test("names that would leave the warehouse are rejected") {
    withWarehouse { (_, wh) =>
      for (bad <- Seq("..", ".", "", "a/b", "a\\b")) {
        assert(message(wh.tableLocation(Identifier.of(Array("db"), bad))).contains("escapes the warehouse"))
        assert(message(wh.tableLocation(Identifier.of(Array(bad), "t"))).contains("escapes the warehouse"))
      }
    }
  }

  test("paths must lie inside the warehouse, symlinks followed") {
    withWarehouse { (root, wh) =>
      assert(wh.checkPath(s"$root/db/events.lance") == s"$root/db/events.lance")
      assert(wh.checkPath(s"file:$root/db/events.lance") == s"$root/db/events.lance")
      assert(message(wh.checkPath(s"$root/db/../../etc")).contains("'..' segments are not allowed"))
      assert(message(wh.checkPath("/etc/passwd")).contains("is outside the warehouse"))
      assert(message(wh.checkPath("s3://bucket/t.lance")).contains("is outside the warehouse"))
      val outside = Files.createTempDirectory("outside")
      Files.createSymbolicLink(root.resolve("db").resolve("link.lance"), outside)
      assert(message(wh.checkPath(s"$root/db/link.lance")).contains("is outside the warehouse"))
    }
  }

  test("object store warehouses compare by prefix") {
    val wh = new Warehouse("lance", Some("s3://bucket/wh"))
    assert(wh.tableLocation(Identifier.of(Array("db"), "t")) == "s3://bucket/wh/db/t.lance")
    assert(wh.checkPath("s3://bucket/wh/db/t.lance") == "s3://bucket/wh/db/t.lance")
    assert(message(wh.checkPath("s3://bucket/other/t.lance")).contains("is outside the warehouse"))
    assert(message(wh.checkPath("/local/t.lance")).contains("is outside the warehouse"))
  }

  test("without a warehouse, identifiers ask for one and paths are taken as given") {
    val wh = new Warehouse("lance", None)
    assert(message(wh.tableLocation(Identifier.of(Array("db"), "t")))
      .contains("set spark.sql.catalog.lance.warehouse"))
    assert(wh.checkPath("/data/t.lance") == "/data/t.lance")
  }

  test("one boundary: linked table folders, namespace folders and a table's own folders are outside") {
    withWarehouse { (root, wh) =>
      val outside = Files.createTempDirectory("outside")
      Files.createDirectories(outside.resolve("ext.lance").resolve("_versions"))
      Files.createSymbolicLink(root.resolve("db").resolve("link.lance"), outside.resolve("ext.lance"))
      Files.createSymbolicLink(root.resolve("linkns"), outside)
      Files.createDirectories(root.resolve("db").resolve("inner.lance"))
      Files.createSymbolicLink(root.resolve("db").resolve("inner.lance").resolve("_versions"),
        outside.resolve("ext.lance").resolve("_versions"))
      for (t <- Seq("link", "inner"))
        assert(message(wh.requireTable(Identifier.of(Array("db"), t))).contains("is outside the warehouse"))
      assert(message(wh.requireTable(Identifier.of(Array("linkns"), "ext"))).contains("is outside the warehouse"))
      assert(message(wh.namespaceExists(Array("linkns"))).contains("a symbolic link leads out of it"))
      assert(wh.listTables(Array("db")).map(_.name).toSeq == Seq("events"))
      assert(wh.listNamespaces(Array.empty).map(_.toSeq).toSeq == Seq(Seq("db")))
      assert(wh.allTables().map(_._2) == Seq("events"))
    }
  }

  test("a table's folders are no namespaces; new namespaces may not collide with Lance's layout") {
    withWarehouse { (_, wh) =>
      assert(message(wh.namespaceExists(Array("db", "events.lance"))).contains("a table's or Lance's own folder"))
      for (bad <- Seq(Array("x.lance"), Array("_versions"), Array("db", "_indices"), Array(".h")))
        assert(message(wh.createNamespace(bad)).contains("collides with Lance's layout"))
      assert(message(wh.createNamespace(Array("a\nb"))).contains("contains a control character"))
      assert(message(wh.tableLocation(Identifier.of(Array("db"), "t\u0001"))).contains("'t\\u0001'"))
    }
  }

  // Every spelling Lance's URL parsing reads as another location (pylance 14.0.2: percent-escapes
  // decoded, dot segments resolved, '?' and '#' cut, S3:// taken as s3://), aimed from a
  // warehouse on each object store at a table beside it.
  private val Escapes = Seq("%2e%2e", "%2E%2E", ".%2e", "%2e.", "%252e%252e", "..%2foutside", "%2e%2e%2f")

  for ((scheme, bucket) <- Seq("s3" -> "opbucket", "gs" -> "opbucket", "az" -> "opcontainer")) {
    test(s"$scheme://: every spelling of a way out is refused, by path and by name") {
      val wh = new Warehouse("lance", Some(s"$scheme://$bucket/wh"))
      val outside = s"$scheme://$bucket/outside/secret.lance"
      val spellings = Escapes.map(e => s"$scheme://$bucket/wh/$e/outside/secret.lance") ++ Seq(
        s"$scheme://$bucket/wh/../outside/secret.lance", s"$scheme://$bucket/wh//../outside/secret.lance",
        s"$scheme://$bucket/wh/./../outside/secret.lance", s"$scheme://$bucket/wh\\..\\outside\\secret.lance",
        s"$scheme://$bucket/wh/db/t.lance?/../../outside/secret.lance", s"$scheme://$bucket/wh/db#/../../outside/secret.lance",
        s"${scheme.toUpperCase}://$bucket/outside/secret.lance", s"$scheme://${bucket.toUpperCase}/wh/db/t.lance",
        s"$scheme://x@$bucket/wh/db/t.lance", s"$scheme:/$bucket/wh/db/t.lance", s"$scheme:///$bucket/wh/db/t.lance",
        outside)
      for (path <- spellings) {
        val m = message(wh.checkPath(path))
        assert(Seq("is refused", "is outside the warehouse", "escapes the warehouse").exists(m.contains), (path, m))
      }
      for (e <- Seq("%2e%2e", "%2E%2E", ".%2e", "%2e.", "%252e", "%64b", "a?b", "a#b")) {
        val m = message(wh.tableLocation(Identifier.of(Array(e, "outside"), "secret")))
        assert(m.contains(s"namespace '$e' is refused in catalog lance"), (e, m))
        assert(message(wh.tableLocation(Identifier.of(Array("db"), e))).contains(s"table '$e' is refused"), e)
        assert(message(wh.createNamespace(Array(e))).contains("is refused"), e)
      }
      // spellings that stay inside are put in normal form, which is what reaches Lance
      val t = s"$scheme://$bucket/wh/db/t.lance"
      for (same <- Seq(s"${scheme.toUpperCase}://$bucket/wh/db/t.lance", s"$scheme://$bucket/wh//db//t.lance",
                       s"$scheme://$bucket/wh/./db/./t.lance", s"$scheme://$bucket/wh/db/t.lance/"))
        assert(wh.checkPath(same) == t, same)
      assert(wh.tableLocation(Identifier.of(Array("db"), "50%off")) == s"$scheme://$bucket/wh/db/50%off.lance")
    }
  }

  test("normal form: lower-case scheme, no dot or empty segment; escapes and cuts refused on object stores") {
    assert(WarehouseBoundary.normalise("S3://b/wh/./x//y/") == "s3://b/wh/x/y")
    assert(WarehouseBoundary.normalise("/a/%2e%2e/b") == "/a/%2e%2e/b") // a plain path is read literally
    assert(WarehouseBoundary.normalise("FILE:///a/b") == "file:///a/b")
    for (bad <- Seq("s3://b/a/%2e%2e/x", "gs://b/a?x", "az://c/a#x", "s3://b/a\\b", "s3:///a", "s3:b/a", "s3://b/a/../x",
                    "file:///a?x", "file:///a\\..\\b"))
      assert(message(WarehouseBoundary.normalise(bad)).contains("is refused"), bad)
  }

  test("file: URIs are decoded once, as Lance decodes them, and checked as local paths") {
    withWarehouse { (root, wh) =>
      assert(wh.checkPath(s"file://$root/%64b/events.lance") == s"$root/db/events.lance")
      for (p <- Seq(s"file://$root/%2e%2e/x.lance", s"FILE://$root/db/%2E%2E/%2e%2e/x.lance", s"file://$root/.%2e/x.lance"))
        assert(message(wh.checkPath(p)).contains("is outside the warehouse"), p)
      assert(message(wh.checkPath(s"file://$root\\db\\events.lance")).contains("backslash"))
    }
  }

  test("names longer than local file systems take are refused with the limit") {
    withWarehouse { (_, wh) =>
      assert(message(wh.createNamespace(Array("n" * 300))).contains("at most 255 bytes"))
      assert(message(wh.tableLocation(Identifier.of(Array("db"), "t" * 250))).contains("249 for a table name"))
      assert(wh.tableLocation(Identifier.of(Array("db"), "t" * 249)).endsWith("t" * 249 + ".lance"))
      assert(message(wh.requireTable(Identifier.of(Array("n" * 256), "t"))).contains("is too long"))
    }
  }
}
