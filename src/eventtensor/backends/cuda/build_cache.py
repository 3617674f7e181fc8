"""A disk cache of a megakernel's host-side build products: prepared programs
(`schedule.prepare`: the pass pipeline with its validation, seconds for a real model) and
generated sources with their static templates (`build.build_kernel`), so that a warm start
skips them.

Entries are keyed by what made them (the program's repr, the mode, the options) and by the
package version and Python source (any change to the passes or the code generator
invalidates every entry); stored as pickles beside the cubins (`compiler.cache_dir`),
written atomically. A missing or unreadable entry is recomputed.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from ... import __version__
from ...ir import Program
from ...schedule import prepare
from .compiler import cache_dir

PACKAGE = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=1)
def _package_hash() -> str:
    """Hash of the package's Python sources (they decide every cached product)."""
    h = hashlib.sha256(__version__.encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        h.update(path.relative_to(PACKAGE).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def entry_key(*parts: str) -> str:
    """Key of the entry made from `parts` by this exact package."""
    return hashlib.sha256("\0".join([*parts, _package_hash()]).encode()).hexdigest()[:32]


def _path(kind: str, name: str, key: str) -> Path:
    return cache_dir() / f"{kind}-{name}-{key}.pickle"


def load(kind: str, name: str, key: str, of_type: type | tuple[type, ...]) -> Any | None:
    """The entry stored under (kind, name, key) if it is there, readable and an `of_type`."""
    try:
        value = pickle.loads(_path(kind, name, key).read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError,
            IndexError, TypeError, ValueError):
        return None
    return value if isinstance(value, of_type) else None


def store(kind: str, name: str, key: str, value: Any) -> None:
    """Write the entry atomically (a reader sees the old entry, none, or the whole new one)."""
    path = _path(kind, name, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def program_key(program: Program, mode: str) -> str:
    return entry_key(repr(program), mode)


def prepare_cached(program: Program, mode: str) -> Program:
    """`prepare(program, mode)`, from the disk cache when an equal program was prepared
    for `mode` by this exact package before."""
    key = program_key(program, mode)
    cached = load("prepared", f"{program.name}-{mode}", key, Program)
    if cached is not None:
        return cached
    prepared = prepare(program, mode)
    store("prepared", f"{program.name}-{mode}", key, prepared)
    return prepared
