"""ofccl_perf's progress line: on stderr when stderr is a terminal, absent when
it is a pipe; the results on stdout are the same either way. One rank (the
singleton bootstrap), all-gather, reduce-scatter and broadcast, every element
checked."""
import os
import pty
import select
import subprocess
import time

PERF = os.environ.get("PERF_BINARY", "")
ARGS = ["-b", "1K", "-e", "16K", "-f", "4", "-n", "2", "-w", "1", "-c", "1"]


def env():
    e = dict(os.environ)
    # A singleton: no launcher variables may be inherited from the caller.
    for k in list(e):
        if k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_", "OFCCL_BOOT")):
            del e[k]
    e["OFCCL_PROVIDER"] = "local"
    return e


def rows(stdout):
    return [ln.split() for ln in stdout.splitlines() if ln.startswith("  ")]


def run_piped(what):
    p = subprocess.run([PERF, "-o", what] + ARGS, env=env(), capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout, p.stderr


def run_on_tty(what):
    """stdout to a pipe, stderr to a pseudo-terminal; returns (rc, stdout, stderr)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([PERF, "-o", what] + ARGS, env=env(), stdout=subprocess.PIPE,
                         stderr=slave, text=True)
    os.close(slave)
    err = b""
    deadline = time.time() + 120
    while time.time() < deadline:
        r, _, _ = select.select([master], [], [], 0.5)
        if r:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            err += chunk
        elif p.poll() is not None:
            break
    out = p.communicate(timeout=60)[0]
    os.close(master)
    return p.returncode, out, err.decode(errors="replace")


def test_binary_given():
    assert PERF and os.access(PERF, os.X_OK), "PERF_BINARY must name the built ofccl_perf"


def test_quiet_when_piped():
    for what, coll, n in (("all", ("ag", "rs"), 6), ("bc", ("bc",), 3)):
        rc, out, err = run_piped(what)
        assert rc == 0, err
        assert "sizes done" not in err and "\r" not in err, err
        r = rows(out)
        assert len(r) == n and {x[0] for x in r} == set(coll), out
        assert all(x[-1] == "0" for x in r), out  # no wrong element


def test_progress_on_a_terminal():
    rc, out, err = run_on_tty("all")
    assert rc == 0, err
    # Every size reported, with a time estimate, then the closing line.
    assert "ofccl_perf: ag 1/6 sizes done, about" in err, err
    assert "ofccl_perf: rs 6/6 sizes done" in err, err
    assert "ofccl_perf: 6 sizes in" in err, err
    assert len(rows(out)) == 6 and all(x[-1] == "0" for x in rows(out)), out
