"""Compile generated megakernels with NVRTC (through cuda-python) for sm_90a.

Cubins are cached on disk, keyed by a hash of the source, the options, the architecture and
the package version; writes are atomic (temporary file, then rename) under a file lock. With
EVENTTENSOR_DUMP=<folder>, every compile writes the .cu source, the PTX and the cubin there;
EVENTTENSOR_NVRTC_OPTIONS adds NVRTC options (split like a shell command line) to every
compile, e.g. "--split-compile=0" (NVVM's optimizer on every CPU).

Two ways from PTX to machine code: NVRTC's own, which assembles the kernel as one whole
program (register allocation across the calls of its out-of-line task bodies), or, with
fast_compile="separate", NVRTC to PTX only and nvJitLink assembling every function on its
own, with the standard calling convention (the callee saves the registers it takes), and
linking them: a cold build of the Llama-3.2-1B decode kernel took 11.5 s and 7.9 s (2 CPUs,
NVRTC 13.0, nvJitLink 13.5; benchmarks/results/compile/compile_bench_separate_88b9534_cpu.md).
Neither needs a GPU, so CI compiles every generated kernel.
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


SEPARATE = "separate"  # fast_compile: functions assembled one by one (nvJitLink) and linked
FAST_COMPILE = (SEPARATE, "min", "mid", "max")  # (the rest: NVRTC --Ofast-compile levels)


def _options(arch: str, fast_compile: str | None = None) -> list[bytes]:
    """NVRTC's options: for a cubin of `arch`, or with fast_compile=SEPARATE the PTX of its
    virtual architecture (compute_90a for sm_90a) that `_link` assembles."""
    if fast_compile is not None and fast_compile not in FAST_COMPILE:
        raise ValueError(f"fast_compile must be one of {', '.join(FAST_COMPILE)} or None, "
                         f"got {fast_compile!r}")
    target = arch.replace("sm_", "compute_") if fast_compile == SEPARATE else arch
    level = fast_compile if fast_compile not in (None, SEPARATE) else None
    return [f"--gpu-architecture={target}".encode(), f"-I{INCLUDE}".encode(), b"-std=c++17",
            b"--use_fast_math", b"-default-device", b"-lineinfo",
            *([f"--Ofast-compile={level}".encode()] if level else []),
            *map(str.encode, shlex.split(os.environ.get("EVENTTENSOR_NVRTC_OPTIONS", "")))]


def compile_source(source: str, name: str, arch: str = ARCH,
                   fast_compile: str | None = None) -> Compiled:
    """Cubin for `source` (entry `name`), from the cache or NVRTC. `fast_compile` (one of
    FAST_COMPILE) trades code quality for compile time: SEPARATE, every function assembled on
    its own by nvJitLink; else NVRTC's --Ofast-compile level."""
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
        if fast_compile == SEPARATE:
            ptx = _nvrtc(source, name, opts, cubin=False)[1]
            cubin = _link(ptx, name, arch)
        else:
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


def toolchain() -> str:
    """The NVRTC and nvJitLink versions compiles here run with, e.g. "NVRTC 13.0, nvJitLink
    13.5" ("unavailable" for one that does not load)."""
    try:
        from cuda.bindings import nvrtc
        nvrtc_version = ".".join(map(str, nvrtc.nvrtcVersion()[1:]))
    except Exception:  # (not installed, or its library not found)
        nvrtc_version = "unavailable"
    try:
        from cuda.bindings import nvjitlink
        link_version = ".".join(map(str, nvjitlink.version()))
    except Exception:
        link_version = "unavailable"
    return f"NVRTC {nvrtc_version}, nvJitLink {link_version}"


def _nvrtc(source: str, name: str, opts: list[bytes],
           cubin: bool = True) -> tuple[bytes | None, bytes]:
    """NVRTC's cubin (None where `cubin` is false: a virtual architecture's compile) and PTX
    of `source`."""
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
        binary = None
        if cubin:
            (n,) = check(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
            binary = b" " * n
            check(nvrtc.nvrtcGetCUBIN(prog, binary), "cubin")
        (n,) = check(nvrtc.nvrtcGetPTXSize(prog), "ptx size")
        ptx = b" " * n
        check(nvrtc.nvrtcGetPTX(prog, ptx), "ptx")
        return binary, ptx.rstrip(b"\0")  # (NVRTC's size counts the terminating NUL)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _link(ptx: bytes, name: str, arch: str) -> bytes:
    """The cubin of `ptx` for `arch`, its functions assembled one by one (the standard calling
    convention) on every CPU and linked, by nvJitLink."""
    from cuda.bindings import nvjitlink

    opts = [f"-arch={arch}", "-lineinfo", "-split-compile=0"]
    handle = nvjitlink.create(len(opts), opts)
    try:
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, ptx, len(ptx), f"{name}.ptx")
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as e:
            log = bytearray(nvjitlink.get_error_log_size(handle))
            nvjitlink.get_error_log(handle, log)
            raise CompileError(f"nvJitLink could not assemble kernel {name} ({e}):\n"
                               f"{log.decode(errors='replace').rstrip(chr(0))}") from None
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)
