"""ofccl: bucketed all-gather and reduce-scatter for sharded training.

    import numpy as np, ofccl
    ctx = ofccl.Context()              # PMIx, TCP rendezvous (OFCCL_BOOT_*) or singleton
    comm = ctx.world()
    x = ctx.alloc(1024, np.float32)    # ofccl memory: no staging copy
    out = comm.all_gather(x).wait()    # size * 1024 elements

torch integrations live in ``ofccl.torch`` (FSDP2 hooks, the 'ofccl'
torch.distributed backend); importing this package never imports torch.
"""

from . import errors
from ._lib import strerror
from .buffers import address_of
from .comm import Comm, Context, Op, Request
from .errors import (Aborted, Again, BootstrapError, Busy, ConfigError, Corrupt, Error,
                     InternalError, InvalidArgument, LibraryNotFound, Mismatch, NotSupported,
                     OutOfMemory, OverBudget, ProviderError, RemoteError, ResourceError,
                     StateError, Timeout)

__version__ = "0.1.0"


def library_version() -> str:
    """Version of the loaded libofccl."""
    from . import _lib
    return _lib.text(_lib.lib().ofccl_version_string())


__all__ = [
    "Context", "Comm", "Request", "Op", "Error", "InvalidArgument", "OutOfMemory", "NotSupported",
    "ProviderError", "BootstrapError", "Timeout", "Again", "RemoteError", "Corrupt",
    "ConfigError", "Busy", "InternalError", "Aborted", "Mismatch", "StateError", "OverBudget",
    "ResourceError", "LibraryNotFound", "errors", "strerror", "address_of", "library_version",
]
