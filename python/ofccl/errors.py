"""Exceptions carrying ofccl's error code and message.

Every failure of a C call raises an ``Error`` subclass chosen by the code
(the OFCCL_ERROR_LIST of ofccl.h); ``code`` is the negative C code, ``name``
its OFCCL_ERR_ suffix and ``message`` the library's own last error message
(what failed, where, what to do). Argument errors found in Python before any
C call raise ``InvalidArgument`` with the same shape (code -1).
"""

from __future__ import annotations

import builtins
from typing import Dict, Type


class Error(Exception):
    """Base of every ofccl exception."""

    code: int = -12
    name: str = "INTERNAL"

    def __init__(self, message: str, code: int | None = None):
        if code is not None:
            self.code = code
        self.message = message
        super().__init__(f"[{self.name} {self.code}] {message}")


def _make(cls_name: str, name: str, code: int, *bases: type, doc: str) -> Type[Error]:
    return type(cls_name, (Error,) + bases, {"code": code, "name": name, "__doc__": doc})


# Codes and names mirror OFCCL_ERROR_LIST (ofccl.h); codes are stable there.
InvalidArgument = _make("InvalidArgument", "INVALID_ARG", -1, ValueError,
                        doc="Invalid argument (also raised for bad buffers found in Python).")
OutOfMemory = _make("OutOfMemory", "NO_MEMORY", -2, MemoryError, doc="Out of memory.")
NotSupported = _make("NotSupported", "NOT_SUPPORTED", -3, NotImplementedError,
                     doc="Operation or capability not supported.")
ProviderError = _make("ProviderError", "PROVIDER", -4, doc="Fabric provider error (sticky).")
BootstrapError = _make("BootstrapError", "BOOTSTRAP", -5,
                       doc="Rank discovery or key exchange failed.")
Timeout = _make("Timeout", "TIMEOUT", -6, builtins.TimeoutError, doc="A deadline passed.")
Again = _make("Again", "AGAIN", -7, doc="Resource temporarily unavailable; call again.")
RemoteError = _make("RemoteError", "REMOTE_ERROR", -8,
                    doc="A peer failed or became unreachable (sticky).")
Corrupt = _make("Corrupt", "CORRUPT", -9, doc="Corrupt or incompatible data from a peer (sticky).")
ConfigError = _make("ConfigError", "CONFIG", -10, ValueError, doc="Invalid configuration.")
Busy = _make("Busy", "BUSY", -11, doc="Object busy: dependent objects are still open.")
InternalError = _make("InternalError", "INTERNAL", -12, doc="Internal error.")
Aborted = _make("Aborted", "ABORTED", -13, doc="Communicator aborted (sticky).")
Mismatch = _make("Mismatch", "MISMATCH", -14, ValueError, doc="Arguments differ across ranks.")
StateError = _make("StateError", "STATE", -15, doc="Object in the wrong state for this call.")
OverBudget = _make("OverBudget", "OVER_BUDGET", -16, MemoryError,
                   doc="Memory budget (OFCCL_POOL_BYTES) exceeded.")
ResourceError = _make("ResourceError", "RESOURCE", -17,
                      doc="A local resource limit was reached (file descriptors, address space).")
LibraryNotFound = _make("LibraryNotFound", "STATE", -15, ImportError,
                        doc="libofccl could not be loaded.")

_BY_CODE: Dict[int, Type[Error]] = {
    c.code: c
    for c in (InvalidArgument, OutOfMemory, NotSupported, ProviderError, BootstrapError, Timeout,
              Again, RemoteError, Corrupt, ConfigError, Busy, InternalError, Aborted, Mismatch,
              StateError, OverBudget, ResourceError)
}


def from_code(code: int, message: str) -> Error:
    """The exception for C error `code` (an unknown code gives a plain Error)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return Error(message, code)
    return cls(message)
