"""Collectives as named ranges in torch.profiler.

When torch is imported and a profiler is recording, every collective opens a
range named ``ofccl::<collective> bytes=<B> ranks=<N>`` (the bytes this rank
contributes, the communicator's size); it closes when the request
completes, so the range covers the collective's real duration (not only its
posting). Without torch, or with no profiler running, this costs one
dictionary lookup per collective.
"""

from __future__ import annotations

import sys
from typing import Any, Optional


def torch_loaded() -> bool:
    return "torch" in sys.modules


def begin(name: str, nbytes: int, size: int) -> Optional[Any]:
    torch = sys.modules.get("torch")
    if torch is None or not torch.autograd._profiler_enabled():
        return None
    rf = torch.autograd.profiler.record_function(f"ofccl::{name} bytes={nbytes} ranks={size}")
    rf.__enter__()
    return rf


def end(rf: Optional[Any]) -> None:
    if rf is not None:
        rf.__exit__(None, None, None)
