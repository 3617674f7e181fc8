"""Compile generated megakernels with NVRTC (through cuda-python) for sm_90a.

Cubins are cached on disk, keyed by a hash of the source, the options, the architecture and
the package version; writes are atomic (temporary file, then rename) under a file lock. With
EVENTTENSOR_DUMP=<folder>, every compile writes the .cu source, the PTX and the cubin there;
EVENTTENSOR_NVRTC_OPTIONS adds NVRTC options (split like a shell command line) to every
compile, e.g. "--split-compile=0" (NVVM's optimizer on every CPU).
NVRTC needs no GPU, so CI compiles every generated kernel.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ... import __version__
from ...inspect import log

INCLUDE = Path(__file__).parent / "include"
ARCH = "sm_90a"


class CompileError(RuntimeError):
    """NVRTC rejected a generated kernel; the message holds its log."""


@dataclass(frozen=True)
class Compiled:
    name: str          # kernel entry point
    cubin: bytes
    seconds: float     # compile time (0 when served from the cache)
    cached: bool


def cache_dir() -> Path:
    root = os.environ.get("EVENTTENSOR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "eventtensor")
    return Path(root)


FAST_COMPILE = ("min", "mid", "max")  # NVRTC --Ofast-compile levels


def _options(arch: str, fast_compile: str | None = None) -> list[bytes]:
    if fast_compile is not None and fast_compile not in FAST_COMPILE:
        raise ValueError(f"fast_compile must be one of {', '.join(FAST_COMPILE)} or None, "
                         f"got {fast_compile!r}")
    return [f"--gpu-architecture={arch}".encode(), f"-I{INCLUDE}".encode(), b"-std=c++17",
            b"--use_fast_math", b"-default-device", b"-lineinfo",
            *([f"--Ofast-compile={fast_compile}".encode()] if fast_compile else []),
            *map(str.encode, shlex.split(os.environ.get("EVENTTENSOR_NVRTC_OPTIONS", "")))]


def compile_source(source: str, name: str, arch: str = ARCH,
                   fast_compile: str | None = None) -> Compiled:
    """Cubin for `source` (entry `name`), from the cache or NVRTC. `fast_compile` (one of
    FAST_COMPILE) trades code quality for compile time: NVRTC's --Ofast-compile level."""
    headers = "".join(p.read_text() for p in sorted(INCLUDE.rglob("*.cuh")))
    opts = _options(arch, fast_compile)
    key = hashlib.sha256("\0".join([source, headers, *map(bytes.decode, opts), arch,
                                    __version__]).encode()).hexdigest()[:32]
    path = cache_dir() / f"{name}-{arch}-{key}.cubin"
    if path.exists():
        return Compiled(name, path.read_bytes(), 0.0, True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return Compiled(name, path.read_bytes(), 0.0, True)
        t0 = time.perf_counter()
        cubin, ptx = _nvrtc(source, name, opts)
        seconds = time.perf_counter() - t0
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        os.replace(tmp, path)
    log(f"compiled {name} for {arch} in {seconds:.2f} s ({len(cubin)} bytes)")
    dump = os.environ.get("EVENTTENSOR_DUMP")
    if dump:
        d = Path(dump)
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{name}.cu").write_text(source)
        (d / f"{name}.ptx").write_bytes(ptx)
        (d / f"{name}.cubin").write_bytes(cubin)
    return Compiled(name, cubin, seconds, False)


def compile_many(kernels: Sequence[tuple], jobs: int | None = None) -> list[Compiled]:
    """`compile_source` of each (source, entry name[, arch, fast_compile]), all of one length,
    `jobs` at a time (default: one per
    CPU; NVRTC runs without the interpreter lock), so that later compiles of the same kernels
    are cache hits."""
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(kernels)))
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(compile_source, *zip(*kernels))) if kernels else []


def _nvrtc(source: str, name: str, opts: list[bytes]) -> tuple[bytes, bytes]:
    from cuda.bindings import nvrtc

    def check(res, what):
        err = res[0] if isinstance(res, tuple) else res
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC {what} failed for kernel {name}: {err}")
        return res[1:] if isinstance(res, tuple) else None

    (prog,) = check(nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []),
                    "create")
    try:
        res = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        (size,) = check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        log = b" " * size
        check(nvrtc.nvrtcGetProgramLog(prog, log), "log")
        if res[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC could not compile kernel {name}:\n"
                               f"{log.decode(errors='replace')}")
        (n,) = check(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        cubin = b" " * n
        check(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
        (n,) = check(nvrtc.nvrtcGetPTXSize(prog), "ptx size")
        ptx = b" " * n
        check(nvrtc.nvrtcGetPTX(prog, ptx), "ptx")
        return cubin, ptx.rstrip(b"\0")  # (NVRTC's size counts the terminating NUL)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
