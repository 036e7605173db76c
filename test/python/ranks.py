"""Run a scenario on N real ranks: one Python process each, joined through
ofccl's TCP rendezvous on loopback, under a deadline; every process is reaped.

A scenario is a module-level function ``f(comm, *args)`` of a test file; its
return value (JSON) comes back per rank. A rank that raises fails the test with
its traceback; a rank that hangs is killed at the deadline.
"""

import json
import os
import socket
import subprocess
import sys
import time

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(nranks, module_file, scenario, *args, settings=None, rank_settings=None, timeout=120,
        expect_fail=False, python=sys.executable, env=None):
    """Results per rank. `python` runs the ranks (default: this interpreter)
    with environment `env` (default: this one's)."""
    port = free_port()
    procs = []
    try:
        for r in range(nranks):
            s = {"BOOT_ROOT": f"127.0.0.1:{port}", "BOOT_RANK": r, "BOOT_SIZE": nranks,
                 "BOOT_TIMEOUT_MS": 30000, "TIMEOUT_MS": 30000}
            s.update(settings or {})
            s.update((rank_settings or {}).get(r, {}))
            cmd = [python, WORKER, os.path.abspath(module_file), scenario,
                   json.dumps(s), json.dumps(list(args))]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=env))
        deadline = time.monotonic() + timeout
        outs = []
        for p in procs:
            left = max(1.0, deadline - time.monotonic())
            try:
                out, err = p.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{scenario}: a rank did not finish within {timeout} s")
            outs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    results = []
    for r, (rc, out, err) in enumerate(outs):
        if rc != 0 and not expect_fail:
            raise AssertionError(f"{scenario}: rank {r} exited {rc}\n--- stdout\n{out}\n"
                                 f"--- stderr\n{err}")
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        results.append(json.loads(lines[-1][7:]) if lines else {"rc": rc, "stderr": err})
    return results
