"""A benchmark script of benchmarks/ loaded as a module, for the tests of its pure parts."""
import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_bench(name: str):
    """Generator for a module-scoped fixture: benchmarks/`name`.py as module `name` (in
    sys.modules while the tests run, where dataclasses look their module up; its folder on
    sys.path for its sibling imports)."""
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[name]
    sys.path.remove(str(BENCHMARKS))
