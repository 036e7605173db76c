"""ofccl for PyTorch: FSDP2 hooks and the 'ofccl' torch.distributed backend.

Importing this module registers the backend, so ``dist.init_process_group
("ofccl")`` works after ``import ofccl.torch``.
"""

from ._torchcoll import Collectives, TensorPool, Work, redop
from .torch_backend import BACKEND, ProcessGroupOfccl, register
from .torch_fsdp import AllGather, ReduceScatter

register()

__all__ = ["AllGather", "ReduceScatter", "ProcessGroupOfccl", "Work", "Collectives", "TensorPool",
           "redop", "register", "BACKEND"]
