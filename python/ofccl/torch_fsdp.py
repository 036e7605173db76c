"""FSDP2 custom collectives (torch >= 2.9): torch's AllGather / ReduceScatter
protocols of torch/distributed/fsdp/_fully_shard/_fsdp_api.py.

    ag, rs = ofccl.torch.AllGather(comm), ofccl.torch.ReduceScatter(comm)
    model.set_custom_all_gather(ag)
    model.set_custom_reduce_scatter(rs)

``allocate`` hands out ofccl memory for CPU buffers (from a pool, so each
buffer size is allocated and registered once) and plain device memory for
CUDA, which ``__call__`` stages. FSDP all-gathers in place (the input is this
rank's slice of the output) and passes mixed-dtype buckets as uint8; both
work as they are. Without ``comm``, the hooks use the communicator of the
'ofccl' process group they are called with (or of the default group).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch
import torch.distributed as dist

from . import gpu
from ._torchcoll import Collectives, TensorPool, Work, redop
from .comm import Comm
from .errors import InvalidArgument, StateError

try:  # the protocols exist from torch 2.9 on; earlier, plain classes of the same shape
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather as _AllGatherBase
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as _ReduceScatterBase
except Exception:  # noqa: BLE001 - absent before 2.9 (1.13 on Python 3.11 even fails to import fsdp)
    _AllGatherBase = object  # type: ignore[misc,assignment]
    _ReduceScatterBase = object  # type: ignore[misc,assignment]


def _group_comm(group: Any) -> Optional[Comm]:
    comm = getattr(group, "ofccl_comm", None)
    if comm is None and group is None and dist.is_initialized():
        comm = getattr(dist.distributed_c10d._get_default_group(), "ofccl_comm", None)
    return comm


class _Hook:
    def __init__(self, comm: Optional[Comm] = None):
        self._comm = comm
        self._coll: Optional[Collectives] = None
        self._pool: Optional[TensorPool] = None

    def _resolve(self, group: Any) -> Collectives:
        comm = self._comm or _group_comm(group)
        if comm is None:
            comm = _group_comm(None)
        if comm is None:
            raise StateError("ofccl FSDP hook: no communicator: pass ofccl.torch.AllGather(comm) "
                             "or run on the 'ofccl' process group")
        if group is not None and hasattr(group, "size") and (
                group.size() != comm.size or group.rank() != comm.rank):
            raise InvalidArgument(f"ofccl FSDP hook: the group is rank {group.rank()} of "
                                  f"{group.size()}, the ofccl communicator rank {comm.rank} of "
                                  f"{comm.size}; they must be the same ranks")
        if self._coll is None or self._coll.comm is not comm:
            self._coll = Collectives(comm)
        return self._coll

    def allocate(self, size: Sequence[Any], *, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
        device = torch.device(device)
        if device.type == "cuda":
            comm = self._comm or _group_comm(None)
            if comm is not None:  # symmetric GPU memory: the all-gather runs in place in it
                count = math.prod(int(s) for s in size)
                t = gpu.collectives_for(comm).alloc(count, dtype, device)
                return t.view(*[int(s) for s in size])
        if device.type != "cpu":
            return torch.empty(*size, dtype=dtype, device=device)
        if self._pool is None:
            comm = self._comm or _group_comm(None)
            if comm is None:
                return torch.empty(*size, dtype=dtype, device=device)
            self._pool = TensorPool(comm.ctx)
        count = math.prod(int(s) for s in size)
        return self._pool.take(count, dtype).view(*[int(s) for s in size])


def _result(work: Work, async_op: bool) -> Optional[Work]:
    if async_op:
        return work
    work.wait()
    return None


class AllGather(_Hook, _AllGatherBase):
    """FSDP2 all-gather over ofccl: output = every rank's input, in rank order."""

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                 group: dist.ProcessGroup, async_op: bool = False) -> Optional[Work]:
        return _result(self._resolve(group).all_gather(output_tensor, input_tensor), async_op)


class ReduceScatter(_Hook, _ReduceScatterBase):
    """FSDP2 reduce-scatter over ofccl: SUM, AVG, PREMUL_SUM (with its factor)."""

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                 group: dist.ProcessGroup, op: Any = dist.ReduceOp.SUM,
                 async_op: bool = False) -> Optional[Work]:
        coll = self._resolve(group)
        return _result(coll.reduce_scatter(output_tensor, input_tensor, redop(op)), async_op)
