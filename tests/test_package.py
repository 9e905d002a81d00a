"""The package's public names stay what they are whatever its modules were imported: a
submodule named like a public function (``lance_compact.cleanup``) would replace the function
on the package once something imports it."""
import importlib
import pkgutil

import lance_compact


def test_importing_every_module_shadows_no_public_name():
    public = {name: getattr(lance_compact, name) for name in lance_compact.__all__}
    for m in pkgutil.walk_packages(lance_compact.__path__, "lance_compact."):
        if m.name != "lance_compact.engine":  # the engine's main module: imported by itself only
            importlib.import_module(m.name)
    for name, value in public.items():
        assert getattr(lance_compact, name) is value, f"lance_compact.{name} was replaced by a module"
    # and the other way round: no public name is also a module's name
    modules = {m.name.rsplit(".", 1)[-1] for m in pkgutil.iter_modules(lance_compact.__path__)}
    assert not modules & set(lance_compact.__all__), modules & set(lance_compact.__all__)
