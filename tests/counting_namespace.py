"""A Lance Namespace class of the tests' own, as an operator names one by its class path
(``spark.sql.catalog.<name>.impl=counting_namespace.CountingNamespace``): pylance's directory
namespace that writes a line (its process id) to ``<count_dir>/describe_table`` on each
DescribeTable, so a test sees that the engine and the executors opened tables through it."""
import os

from lance.namespace import DirectoryNamespace


class CountingNamespace(DirectoryNamespace):
    def __init__(self, **properties: str) -> None:
        self._count_dir = properties.pop("count_dir")
        super().__init__(**properties)

    def describe_table(self, request):
        with open(os.path.join(self._count_dir, "describe_table"), "a") as f:
            f.write(f"{os.getpid()}\n")
        return super().describe_table(request)
