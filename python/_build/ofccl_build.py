"""A PEP 517 build backend with no dependencies, so `pip install ./python`
works without reaching a package index (Debian's pip isolates builds and this
machine's index may be unreachable).

The wheel holds the package ofccl/, the C extension ofccl._fast when it
compiles (a C compiler and Python's headers), and, when OFCCL_LIBRARY names a
built libofccl.so at build time, a copy of that library beside the package
(found there at run time; see ofccl/_lib.py).
"""

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

NAME, VERSION = "ofccl", "0.1.0"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY = "Bucketed all-gather and reduce-scatter for sharded training over libfabric"


def _metadata() -> str:
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\nSummary: {SUMMARY}\n"
            "License: BSD-3-Clause\nRequires-Python: >=3.9\nRequires-Dist: numpy\n"
            "Provides-Extra: torch\nRequires-Dist: torch; extra == \"torch\"\n")


def _compile_fast(out_dir: str):
    """Path of the built extension, or None (then the package uses ctypes only)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    out = os.path.join(out_dir, "_fast" + suffix)
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        print(f"ofccl: {include}/Python.h missing (install python3-dev): building without the "
              "C hot path; calls go through ctypes", file=sys.stderr)
        return None
    cmd = cc + ["-shared", "-fPIC", "-O2", "-std=c11", f"-I{include}",
                os.path.join(HERE, "ofccl", "_fast.c"), "-o", out]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"ofccl: compiling the C hot path failed ({exc}); calls go through ctypes",
              file=sys.stderr)
        return None
    return out


def _tag(has_ext: bool) -> str:
    if not has_ext:
        return "py3-none-any"
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{impl}-{plat}"


def _record_line(arc: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arc},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {}
    pkg = os.path.join(HERE, "ofccl")
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), "rb") as f:
                files[f"ofccl/{name}"] = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        ext = _compile_fast(tmp)
        if ext:
            with open(ext, "rb") as f:
                files[f"ofccl/{os.path.basename(ext)}"] = f.read()
        lib = os.environ.get("OFCCL_LIBRARY")
        if lib and os.path.exists(lib):
            with open(lib, "rb") as f:
                files["ofccl/libofccl.so"] = f.read()
    tag = _tag(ext is not None or "ofccl/libofccl.so" in files)
    dist = f"{NAME}-{VERSION}.dist-info"
    files[f"{dist}/METADATA"] = _metadata().encode()
    files[f"{dist}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: ofccl_build\nRoot-Is-Purelib: "
                              f"{'false' if tag != 'py3-none-any' else 'true'}\nTag: {tag}\n"
                              ).encode()
    files[f"{dist}/top_level.txt"] = b"ofccl\n"
    record = [_record_line(a, d) for a, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = f"{NAME}-{VERSION}-{tag}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files.items():
            z.writestr(arc, data)
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    out = os.path.join(sdist_directory, base + ".tar.gz")
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, base)
        shutil.copytree(HERE, root, ignore=shutil.ignore_patterns("__pycache__", "*.so",
                                                                  "build", "*.egg-info"))
        with open(os.path.join(root, "PKG-INFO"), "w") as f:
            f.write(_metadata())
        shutil.make_archive(os.path.join(tmp, base), "gztar", tmp, base)
        shutil.move(os.path.join(tmp, base + ".tar.gz"), out)
    return os.path.basename(out)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []
