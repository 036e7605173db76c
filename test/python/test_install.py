"""`pip install ./python` works offline into a venv over the Debian interpreter
(--system-site-packages, as Debian's externally-managed rule asks), bundling
the built libofccl.so and the C hot path, and the installed package runs a
collective from a directory outside the source tree."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(subprocess.run([sys.executable, "-c", "import venv, ensurepip"],
                                   capture_output=True).returncode != 0,
                    reason="python3-venv is not installed")
def test_pip_install_into_a_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    py = str(venv / "bin" / "python")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the installed copy, not the source tree
    p = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-cache-dir",
                        os.path.join(ROOT, "python")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    env.pop("OFCCL_LIBRARY", None)  # the wheel carries the library built beside it
    code = ("import numpy as np, ofccl, ofccl._lib as L\n"
            "assert L.fast() is not None, 'no C hot path'\n"
            "assert '/site-packages/ofccl/' in ofccl.__file__, ofccl.__file__\n"
            "ctx = ofccl.Context(); c = ctx.world()\n"
            "out = c.all_gather(np.arange(3, dtype=np.float32)).wait()\n"
            "assert list(out) == [0, 1, 2], out\n"
            "c.close(); ctx.close(); print('installed ok')\n")
    p = subprocess.run([py, "-c", code], env=env, cwd=str(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "installed ok" in p.stdout, p.stdout + p.stderr
