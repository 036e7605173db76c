"""Turning Python objects into (address, element count, dtype) without copying.

Accepted: numpy arrays, CPU torch tensors (by data pointer), and any object
exposing a writable C-contiguous buffer (bytearray, memoryview, array.array,
ctypes arrays). Every check happens here, before the C call: dtype, C
contiguity, writability of outputs, and device (a CUDA tensor is refused with
a pointer to the torch integration, which stages it). An explicit ``dtype``
reinterprets raw memory: allowed when the object holds bytes (uint8) or
elements of the same size (uint16 memory as bf16).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Tuple

import numpy as np

from .errors import InvalidArgument

F32, F64, BF16, F16, U8 = 0, 1, 2, 3, 4
ITEMSIZE = (4, 8, 2, 2, 1)
NAMES = ("float32", "float64", "bfloat16", "float16", "uint8")

_BY_NAME: Dict[str, int] = {
    "float32": F32, "f32": F32, "float": F32, "float64": F64, "f64": F64, "double": F64,
    "bfloat16": BF16, "bf16": BF16, "float16": F16, "f16": F16, "half": F16, "uint8": U8,
    "u8": U8, "byte": U8,
}
_NP: Dict[Any, int] = {np.dtype(np.float32): F32, np.dtype(np.float64): F64,
                       np.dtype(np.float16): F16, np.dtype(np.uint8): U8}
_MV_FORMATS = {"f": F32, "d": F64, "e": F16, "B": U8, "c": U8}
_torch_map: Dict[Any, int] = {}
_raw_kind = [""]  # what the last object without a known element type held


def _torch():
    """torch if the program imported it (ofccl never imports it for numpy users)."""
    return sys.modules.get("torch")


def torch_dtypes() -> Dict[Any, int]:
    if not _torch_map:
        t = _torch()
        if t is not None:
            _torch_map.update({t.float32: F32, t.float64: F64, t.bfloat16: BF16, t.float16: F16,
                               t.uint8: U8})
    return _torch_map


def dtype_code(dtype: Any) -> int:
    """ofccl dtype code of a name ("bf16"), numpy dtype, torch dtype or code."""
    if isinstance(dtype, int) and not isinstance(dtype, bool) and 0 <= dtype < len(NAMES):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _BY_NAME:
        return _BY_NAME[dtype.lower()]
    code = torch_dtypes().get(dtype)
    if code is not None:
        return code
    try:
        npd = np.dtype(dtype)
    except TypeError:
        npd = None
    if npd is not None:
        if npd in _NP:
            return _NP[npd]
        if npd.name == "bfloat16":  # ml_dtypes
            return BF16
    raise InvalidArgument(f"unsupported dtype {dtype!r}: ofccl moves " + ", ".join(NAMES))


def _native(obj: Any, what: str) -> Tuple[int, int, int, int]:
    """(address, bytes, dtype code or -1 when unknown, writable) of `obj`."""
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise InvalidArgument(f"{what}: numpy array is not C-contiguous (strides "
                                  f"{obj.strides}); pass np.ascontiguousarray(...) or a slice "
                                  "along the first axis")
        code = _NP.get(obj.dtype, -1)
        if code < 0 and obj.dtype.name == "bfloat16":
            code = BF16
        if code < 0 and obj.dtype.kind in "fc":
            raise InvalidArgument(f"{what}: numpy dtype {obj.dtype} is not supported: ofccl "
                                  "moves " + ", ".join(NAMES))
        if code < 0:
            _raw_kind[0] = f"numpy dtype {obj.dtype}"
        return obj.__array_interface__["data"][0], obj.nbytes, code, obj.flags.writeable
    t = _torch()
    if t is not None and isinstance(obj, t.Tensor):
        if obj.device.type != "cpu":
            raise InvalidArgument(
                f"{what}: tensor on {obj.device}; ofccl.Comm takes CPU memory. CUDA tensors go "
                "through ofccl.torch (FSDP2 hooks, the 'ofccl' process group), which stage them "
                "through pinned ofccl memory")
        if not obj.is_contiguous():
            raise InvalidArgument(f"{what}: tensor is not contiguous (size {tuple(obj.shape)}, "
                                  f"stride {obj.stride()}); pass .contiguous()")
        code = torch_dtypes().get(obj.dtype)
        if code is None:
            raise InvalidArgument(f"{what}: torch dtype {obj.dtype} is not supported: ofccl "
                                  "moves " + ", ".join(NAMES))
        return obj.data_ptr(), obj.numel() * obj.element_size(), code, True
    try:
        mv = memoryview(obj)
    except TypeError:
        raise InvalidArgument(f"{what}: {type(obj).__name__} exposes no buffer; pass a numpy "
                              "array, a CPU torch tensor or a bytes-like object") from None
    with mv:
        if not mv.c_contiguous:
            raise InvalidArgument(f"{what}: buffer is not C-contiguous")
        fmt = mv.format.lstrip("@=<")
        code = _MV_FORMATS.get(fmt, -1)
        arr = np.frombuffer(mv, dtype=np.uint8) if mv.nbytes else np.empty(0, np.uint8)
        return arr.__array_interface__["data"][0], mv.nbytes, code, not mv.readonly


def resolve(obj: Any, what: str, dtype: int | None, writable: bool) -> Tuple[int, int, int]:
    """(address, element count, dtype code) of `obj`, with every check done."""
    ptr, nbytes, code, can_write = _native(obj, what)
    if writable and not can_write:
        raise InvalidArgument(f"{what}: buffer is read-only; the collective writes into it")
    if dtype is not None and dtype != code:
        if code not in (-1, U8):
            own = ITEMSIZE[code]
            if own != ITEMSIZE[dtype]:
                raise InvalidArgument(f"{what}: holds {NAMES[code]} but dtype={NAMES[dtype]} "
                                      "was asked for; element sizes differ")
        code = dtype
    if code < 0:
        held = _raw_kind[0] if isinstance(obj, np.ndarray) else type(obj).__name__
        raise InvalidArgument(f"{what}: {held} is not an element type ofccl moves ("
                              + ", ".join(NAMES) + "); pass dtype=... to reinterpret the bytes")
    size = ITEMSIZE[code]
    if nbytes % size:
        raise InvalidArgument(f"{what}: {nbytes} bytes is not a whole number of {NAMES[code]} "
                              "elements")
    return ptr, nbytes // size, code


def nbytes(obj: Any) -> int:
    """Bytes of a buffer-like object (already checked by the caller)."""
    return _native(obj, "object")[1]


def address_of(obj: Any) -> int:
    """Data address of a buffer-like object (for tests and tools)."""
    return _native(obj, "object")[0]


def new_like(obj: Any, count: int, code: int) -> Any:
    """A fresh output of `count` elements, of obj's kind (torch tensor or numpy array)."""
    t = _torch()
    if t is not None and isinstance(obj, t.Tensor):
        return t.empty(count, dtype=obj.dtype)
    if code == BF16:
        raise InvalidArgument("bf16 output: numpy has no bfloat16; pass recv= explicitly")
    return np.empty(count, dtype=NAMES[code])

