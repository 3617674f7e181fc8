"""A disk cache of prepared programs (`schedule.prepare`: the pass pipeline with its
validation, about a second for a real model), so that a warm start of a megakernel skips it.

Keyed by the program's repr, the mode, and the package version and source (any change to the
passes invalidates every entry); stored as a pickle beside the cubins (`compiler.cache_dir`),
written atomically. A missing or unreadable entry is recomputed.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from functools import lru_cache
from pathlib import Path

from ... import __version__
from ...ir import Program
from ...schedule import prepare
from .compiler import cache_dir

PACKAGE = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=1)
def _package_hash() -> str:
    """Hash of the package's Python sources (the passes decide what `prepare` returns)."""
    h = hashlib.sha256(__version__.encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        h.update(path.relative_to(PACKAGE).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def prepare_cached(program: Program, mode: str) -> Program:
    """`prepare(program, mode)`, from the disk cache when an equal program was prepared
    for `mode` by this exact package before."""
    key = hashlib.sha256("\0".join([repr(program), mode, _package_hash()]).encode())
    path = cache_dir() / f"prepared-{program.name}-{mode}-{key.hexdigest()[:32]}.pickle"
    try:
        cached = pickle.loads(path.read_bytes())
        if isinstance(cached, Program):
            return cached
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        pass
    prepared = prepare(program, mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        pickle.dump(prepared, f)
    os.replace(tmp, path)
    return prepared
