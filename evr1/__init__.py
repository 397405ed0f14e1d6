"""evr1: reinforcement-learning post-training for video vision-language models.

The library computes; Prefect lives in `tasks/` and `flows/` only, so every stage is also a
plain function and an `evr1` command. `docs/architecture.md` maps the packages and their order.
"""

import importlib
import importlib.abc
import importlib.util
import sys

__version__ = "0.1.0"

# Modules that moved, by their old names. Prefect persists stage results by pickling them, and a
# pickle names its class's module: results written before the move (`evr1.results.StageResult`)
# still load, because the old name resolves to the module's new home.
MOVED: dict[str, str] = {"evr1.results": "evr1.pipeline.results"}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The old name is bound to the new module itself (one module object, one `StageResult` class);
    the import system's placeholder for the old name is dropped, and the new module is left untouched."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: D102
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec):  # noqa: D102
        return None  # the default placeholder module

    def exec_module(self, module):  # noqa: D102
        sys.modules[module.__name__] = importlib.import_module(MOVED[module.__name__])


sys.meta_path.append(_MovedModules())
