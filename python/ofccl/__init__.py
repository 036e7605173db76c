"""ofccl: bucketed all-gather and reduce-scatter for sharded training.

    import numpy as np, ofccl
    ctx = ofccl.Context()              # PMIx, TCP rendezvous (OFCCL_BOOT_*) or singleton
    comm = ctx.world()
    x = ctx.alloc(1024, np.float32)    # ofccl memory: no staging copy
    out = comm.all_gather(x).wait()    # size * 1024 elements
    comm.broadcast(x, root=0).wait()   # in place
    half = comm.split(comm.rank % 2)   # sub-communicator (None for ofccl.UNDEFINED)

Weight push between trainer and rollout ranks: ``Comm.push_plan`` (ofccl.push);
the weight-sync engine shaped like verl's CheckpointEngine: ``ofccl.checkpoint``.

torch integrations live in ``ofccl.torch`` (FSDP2 hooks, the 'ofccl'
torch.distributed backend); importing this package never imports torch.
"""

from . import errors
from ._lib import strerror
from .buffers import address_of
from .comm import Comm, Context, Op, Request
from .push import PushPlan
from .errors import (Aborted, Again, BootstrapError, Busy, ConfigError, Corrupt, Error,
                     InternalError, InvalidArgument, LibraryNotFound, Mismatch, NotSupported,
                     OutOfMemory, OverBudget, ProviderError, RemoteError, ResourceError,
                     StateError, Timeout)

__version__ = "0.1.0"
UNDEFINED = -1  # Comm.split color of a rank that joins no new communicator


def library_version() -> str:
    """Version of the loaded libofccl."""
    from . import _lib
    return _lib.text(_lib.lib().ofccl_version_string())


__all__ = [
    "Context", "Comm", "Request", "Op", "PushPlan", "UNDEFINED", "Error", "InvalidArgument",
    "OutOfMemory", "NotSupported",
    "ProviderError", "BootstrapError", "Timeout", "Again", "RemoteError", "Corrupt",
    "ConfigError", "Busy", "InternalError", "Aborted", "Mismatch", "StateError", "OverBudget",
    "ResourceError", "LibraryNotFound", "errors", "strerror", "address_of", "library_version",
]
