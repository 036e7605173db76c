"""Loading libofccl and declaring its functions for ctypes.

The shared library is found, in order, at ``OFCCL_LIBRARY`` (a path), in the
libdir ``meson install`` recorded in ``_install.py``, inside this package
(where ``pip install .`` puts it), and through the dynamic loader
(``libofccl.so.0``, as ``meson install`` and ``ldconfig`` leave it). Every
function is declared with its argument and result types, so a wrong call fails
in Python instead of corrupting memory. ctypes releases the GIL around each
call, so a blocking ``ofccl_wait`` lets other Python threads run. The hot path
of buffer-protocol objects goes through the small C extension ``_fast`` when it
was built (``fast()``); everything else, and everything when it is missing,
through ctypes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.machinery
import importlib.resources
import importlib.util
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_int, c_size_t, c_uint64,
                    c_void_p)
from typing import Any, List, Optional

from . import errors


class CtxParams(Structure):
    _fields_ = [("size", c_size_t), ("settings", POINTER(c_char_p)), ("errbuf", POINTER(c_char)),
                ("errlen", c_size_t)]


class Redop(Structure):
    _fields_ = [("kind", c_int), ("scalar", c_double)]


class Tensor(Structure):
    _fields_ = [("count", c_size_t), ("full", c_void_p), ("shard", c_void_p)]


class PushSpec(Structure):
    _fields_ = [("size", c_size_t), ("nsenders", c_int), ("senders", POINTER(c_int)),
                ("nreceivers", c_int), ("receivers", POINTER(c_int)), ("ntensors", c_int),
                ("counts", POINTER(c_size_t)), ("dtypes", POINTER(c_int)),
                ("bucket_bytes", c_size_t), ("slice_offset", POINTER(c_size_t)),
                ("slice_count", POINTER(c_size_t)), ("gpu", c_int)]


class Stats(Structure):
    _fields_ = [("size", c_size_t), ("registrations", c_uint64), ("reg_cache_hits", c_uint64),
                ("staged_bytes", c_uint64), ("pool_bytes", c_uint64),
                ("registered_bytes", c_uint64), ("pool_grows", c_uint64),
                ("local_bytes", c_uint64), ("fabric_bytes", c_uint64),
                ("peers_resolved", c_uint64), ("reduced_for_peers", c_uint64),
                ("op_contexts", c_uint64), ("pulled_bytes", c_uint64),
                ("hmem_bytes", c_uint64)]


_pp = POINTER(c_void_p)
# name: (result, argument types); every call returning int follows the
# 0-or-negative-code rule of ofccl.h.
_PROTOS = {
    "ofccl_strerror": (c_char_p, [c_int]),
    "ofccl_version_string": (c_char_p, []),
    "ofccl_dtype_size": (c_size_t, [c_int]),
    "ofccl_ctx_create": (c_int, [POINTER(CtxParams), _pp]),
    "ofccl_ctx_destroy": (c_int, [c_void_p]),
    "ofccl_ctx_last_error": (c_char_p, [c_void_p]),
    "ofccl_ctx_provider": (c_char_p, [c_void_p]),
    "ofccl_ctx_stats": (c_int, [c_void_p, POINTER(Stats)]),
    "ofccl_dump_state": (c_int, [c_void_p, c_void_p]),
    "ofccl_comm_world": (c_int, [c_void_p, _pp]),
    "ofccl_comm_split": (c_int, [c_void_p, c_int, c_int, _pp]),
    "ofccl_comm_destroy": (c_int, [c_void_p]),
    "ofccl_comm_rank": (c_int, [c_void_p, POINTER(c_int)]),
    "ofccl_comm_size": (c_int, [c_void_p, POINTER(c_int)]),
    "ofccl_comm_local_rank": (c_int, [c_void_p, POINTER(c_int)]),
    "ofccl_comm_local_size": (c_int, [c_void_p, POINTER(c_int)]),
    "ofccl_comm_last_error": (c_char_p, [c_void_p]),
    "ofccl_comm_abort": (c_int, [c_void_p]),
    "ofccl_comm_set_timeout": (c_int, [c_void_p, c_uint64]),
    "ofccl_barrier": (c_int, [c_void_p]),
    "ofccl_allgather": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, _pp]),
    "ofccl_reduce_scatter": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, Redop, _pp]),
    "ofccl_broadcast": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, _pp]),
    "ofccl_test": (c_int, [c_void_p, POINTER(c_int)]),
    "ofccl_wait": (c_int, [c_void_p]),
    "ofccl_progress": (c_int, [c_void_p]),
    "ofccl_req_free": (c_int, [c_void_p]),
    "ofccl_shard_range": (c_int, [c_void_p, c_size_t, POINTER(c_size_t), POINTER(c_size_t)]),
    "ofccl_bucket_allgather": (c_int, [c_void_p, POINTER(Tensor), c_int, c_int, _pp]),
    "ofccl_bucket_reduce_scatter": (c_int, [c_void_p, POINTER(Tensor), c_int, c_int, Redop, _pp]),
    "ofccl_bucket_broadcast": (c_int, [c_void_p, POINTER(Tensor), c_int, c_int, c_int, _pp]),
    "ofccl_push_plan_create": (c_int, [c_void_p, POINTER(PushSpec), _pp]),
    "ofccl_push_plan_destroy": (c_int, [c_void_p]),
    "ofccl_push_plan_info": (c_int, [c_void_p, POINTER(c_int), POINTER(c_size_t)]),
    "ofccl_push_tensor_where": (c_int, [c_void_p, c_int, POINTER(c_int), POINTER(c_size_t),
                                        POINTER(c_size_t)]),
    "ofccl_push_bucket": (c_int, [c_void_p, c_int, c_void_p, c_void_p, c_size_t, _pp]),
    "ofccl_push_bucket_used": (c_int, [c_void_p, c_int, c_void_p, c_void_p, c_void_p, c_size_t,
                                       _pp]),
    "ofccl_push_buffer": (c_int, [c_void_p, c_int, _pp]),
    "ofccl_buffer_alloc": (c_int, [c_void_p, c_size_t, _pp]),
    "ofccl_buffer_free": (c_int, [c_void_p, c_void_p]),
    "ofccl_mem_register": (c_int, [c_void_p, c_void_p, c_size_t, _pp]),
    "ofccl_mem_deregister": (c_int, [c_void_p]),
    "ofccl_mem_alloc": (c_int, [c_void_p, c_size_t, _pp]),
    "ofccl_mem_free": (c_int, [c_void_p, c_void_p]),
    "ofccl_comm_set_stream": (c_int, [c_void_p, c_void_p]),
    "ofccl_gpu_buffer_alloc": (c_int, [c_void_p, c_size_t, _pp]),
    "ofccl_gpu_buffer_free": (c_int, [c_void_p, c_void_p]),
    "ofccl_gpu_register": (c_int, [c_void_p, c_void_p, c_size_t]),
    "ofccl_gpu_deregister": (c_int, [c_void_p, c_void_p]),
    "ofccl_req_stream_wait": (c_int, [c_void_p, c_void_p]),
}


def _beside_package() -> str:
    """Where a wheel (pip install .) puts libofccl: in this package. Asked of
    importlib.resources, so an editable install, whose loader maps the
    package's files into its meson build directory, answers too."""
    try:
        return os.fspath(importlib.resources.files(__package__) / "libofccl.so")
    except TypeError:  # not a file on disk (a zip import): no library there
        return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libofccl.so")


def _candidates() -> List[str]:
    names = []
    explicit = os.environ.get("OFCCL_LIBRARY")
    if explicit:
        return [explicit]  # an explicit choice is never silently replaced
    try:
        from . import _install  # written by `meson install`; absent in a source tree
        names.append(os.path.join(_install.LIBDIR, "libofccl.so.0"))
    except ImportError:
        pass
    names.append(_beside_package())
    names.append("libofccl.so.0")
    found = ctypes.util.find_library("ofccl")
    if found:
        names.append(found)
    return names


def _load() -> ctypes.CDLL:
    tried = []
    for name in _candidates():
        if os.sep in name and not os.path.exists(name):
            tried.append(f"{name} (no such file)")
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError as exc:
            tried.append(f"{name} ({exc})")
            continue
        for fn, (res, args) in _PROTOS.items():
            f = getattr(lib, fn)
            f.restype = res
            f.argtypes = args
        return lib
    raise errors.LibraryNotFound(
        "cannot load libofccl: tried " + "; ".join(tried) +
        ". Install the package with it (pip install . at the top of the source tree), "
        "or build it (meson setup build && ninja -C build) and set OFCCL_LIBRARY to "
        "build/libofccl.so, or install it (meson install -C build && ldconfig)")


_lib: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    """The loaded library (loaded on first use)."""
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


_fast_mod: Any = False  # False: not looked for yet; None: not available


def _find_fast() -> Any:
    try:
        from . import _fast  # installed beside the package (meson install, wheel)
        return _fast
    except ImportError:
        pass
    # In a build tree the extension sits in <builddir>/python, beside the
    # libofccl.so that OFCCL_LIBRARY names.
    explicit = os.environ.get("OFCCL_LIBRARY")
    if not explicit:
        return None
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    folder = os.path.join(os.path.dirname(os.path.abspath(explicit)), "python")
    for suffix in suffixes:
        path = os.path.join(folder, "_fast" + suffix)
        if os.path.exists(path):
            spec = importlib.util.spec_from_file_location("ofccl._fast", path)
            if spec is None or spec.loader is None:
                return None
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
    return None


def fast() -> Any:
    """The C hot path (ofccl._fast) bound to the loaded library, or None: then
    every call goes through ctypes, slower by a few microseconds."""
    global _fast_mod
    if _fast_mod is False:
        try:
            mod = _find_fast()
        except ImportError:
            mod = None
        if mod is not None:
            l = lib()
            addr = [ctypes.cast(getattr(l, n), c_void_p).value for n in
                    ("ofccl_allgather", "ofccl_reduce_scatter", "ofccl_wait", "ofccl_test",
                     "ofccl_req_free")]
            mod.bind(*addr)
        _fast_mod = mod
    return _fast_mod


def strerror(code: int) -> str:
    return lib().ofccl_strerror(code).decode()


def text(b: Optional[bytes]) -> str:
    return b.decode(errors="replace") if b else ""
