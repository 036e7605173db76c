"""Job secrets for the TCP rendezvous (OFCCL_BOOT_SECRET_FILE): a random
secret, and a private file holding it for the moment a context is created
(the library reads it once, at the rendezvous; the file is removed after)."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from typing import Any, Dict, Iterator, Optional


def new_secret() -> str:
    """32 random bytes, as hex."""
    return secrets.token_hex(32)


@contextlib.contextmanager
def secret_settings(secret: Optional[str], settings: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    """`settings` plus BOOT_SECRET_FILE naming a private file (mode 0600, in
    /dev/shm where there is one) that holds `secret`, removed on exit. A
    secret file the caller set (settings or OFCCL_BOOT_SECRET_FILE) wins;
    `secret` None adds nothing."""
    if secret is None or "BOOT_SECRET_FILE" in settings or \
            os.environ.get("OFCCL_BOOT_SECRET_FILE"):
        yield settings
        return
    where = "/dev/shm" if os.path.isdir("/dev/shm") else None
    fd, path = tempfile.mkstemp(prefix="ofccl-secret-", dir=where)
    try:
        os.write(fd, secret.encode())
        os.close(fd)
        yield dict(settings, BOOT_SECRET_FILE=path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
