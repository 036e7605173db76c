"""The package as a user installs it: the wheel meson-python builds from the
source tree (pyproject.toml; the C library, its CUDA kernels where nvcc is
found, the C extension and every module of python/ofccl), installed offline
into a fresh venv over the Debian interpreter (--system-site-packages, so
Debian's numpy and torch are seen), then used from there with no source tree,
PYTHONPATH or OFCCL_LIBRARY: every module imports, the wheel holds what
`meson install` installs, and a 2-rank all-gather and a torch-backend
collective run on the installed copy."""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import oracle  # noqa: E402
import ranks  # noqa: E402

PKG = os.path.join(ROOT, "python", "ofccl")
MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(PKG, "*.py")))


def _user_env():
    """A user's environment: nothing pointing into the source or build tree."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "OFCCL_LIBRARY"):
        env.pop(name, None)
    return env


def _run(cmd, timeout, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def _make_venv(venv):
    """The python of a fresh venv over this interpreter that sees Debian's
    packages, meson-python among them."""
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], 120)
    py = str(venv / "bin" / "python")
    have = subprocess.run([py, "-c", "import mesonpy"], capture_output=True, env=_user_env())
    assert have.returncode == 0, "python3-mesonpy is missing: run scripts/install-deps.sh"
    return py


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, the wheel's file names): the wheel built with Debian's
    meson-python and installed into a fresh venv, all offline."""
    tmp = tmp_path_factory.mktemp("install")
    py = _make_venv(tmp / "venv")
    env = _user_env()
    _run([py, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
          "--no-cache-dir", "-w", str(tmp / "wheels"), ROOT], 600, env=env)
    wheels = glob.glob(str(tmp / "wheels" / "ofccl-*.whl"))
    assert len(wheels) == 1, wheels
    _run([py, "-m", "pip", "install", "--no-index", "--no-cache-dir", wheels[0]], 120, env=env)
    names = _run([py, "-m", "zipfile", "-l", wheels[0]], 60).split()
    return py, {n for n in names if n.startswith("ofccl/")}


def test_every_module_imports_from_the_venv(installed, tmp_path):
    py, _ = installed
    venv = os.path.dirname(os.path.dirname(py))
    code = ("import importlib, importlib.metadata, json, sys\n"
            "files, failed = {}, {}\n"
            "for n in sys.argv[1:]:\n"
            "    try:\n"
            "        m = importlib.import_module('ofccl' if n == '__init__' else 'ofccl.' + n)\n"
            "        files[n] = m.__file__\n"
            "    except Exception as e:\n"
            "        failed[n] = repr(e)\n"
            "import ofccl, ofccl._lib as L\n"
            "print(json.dumps({'files': files, 'failed': failed, 'lib': L.lib()._name,"
            " 'fast': getattr(L.fast(), '__file__', None), 'version': ofccl.library_version(),"
            " 'dist': importlib.metadata.version('ofccl')}))\n")
    out = _run([py, "-c", code, *MODULES], 120, env=_user_env(), cwd=str(tmp_path))
    got = json.loads(out.splitlines()[-1])
    assert not got["failed"], (f"modules of python/ofccl that do not import from the installed "
                               f"wheel (missing from py_sources in python/meson.build?): "
                               f"{got['failed']}")
    for name, path in got["files"].items():
        assert path.startswith(venv + os.sep), f"ofccl.{name} came from {path}, not the venv"
    pkg_dir = os.path.dirname(got["files"]["__init__"])
    assert got["lib"] == os.path.join(pkg_dir, "libofccl.so"), got["lib"]
    assert got["fast"] and os.path.dirname(got["fast"]) == pkg_dir, "no C hot path installed"
    assert got["version"] == got["dist"], "the wheel's version is not the library's"


def test_the_wheel_holds_what_meson_installs(installed):
    """The same install rules make both: the wheel's package is meson
    install's, with libofccl inside it instead of _install.py (the libdir)."""
    _, wheel = installed
    build = os.path.dirname(os.environ["OFCCL_LIBRARY"])  # this suite's build tree
    with open(os.path.join(build, "meson-info", "intro-install_plan.json")) as f:
        plan = json.load(f)
    system = {os.path.basename(d["destination"]) for group in plan.values()
              for d in group.values() if "/ofccl/" in d["destination"]}
    assert {n[len("ofccl/"):] for n in wheel} == system - {"_install.py"} | {"libofccl.so"}


def scenario_all_gather(comm, venv):
    import ofccl
    assert ofccl.__file__.startswith(venv), ofccl.__file__
    n = 1000
    mine = oracle.values(comm.rank, n).astype(np.float32)
    out = comm.all_gather(mine).wait()
    want = np.concatenate([oracle.values(r, n) for r in range(comm.size)]).astype(np.float32)
    bad = np.flatnonzero(out != want)
    assert bad.size == 0, f"{bad.size} wrong elements, first at {bad[0]}: {out[bad[0]]}"
    return comm.rank


def scenario_backend(settings, venv):
    import torch
    import torch.distributed as dist
    import ofccl.torch  # registers the backend
    assert ofccl.torch.__file__.startswith(venv), ofccl.torch.__file__
    rank, size = settings["BOOT_RANK"], settings["BOOT_SIZE"]
    port = settings["BOOT_ROOT"].rsplit(":", 1)[1]
    dist.init_process_group("ofccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)
    assert dist.get_backend() == "ofccl"
    n = 257
    t = torch.from_numpy(oracle.values(rank, n, salt=3)).float()
    dist.all_reduce(t)
    want = oracle.reduce_ref([oracle.values(r, n, salt=3) for r in range(size)], "sum")
    oracle.assert_close(t.double().numpy(), want, "float32", "all_reduce")
    dist.destroy_process_group()
    return rank


scenario_backend.no_comm = True


def test_all_gather_on_the_installed_copy(installed):
    py, _ = installed
    venv = os.path.dirname(os.path.dirname(py))
    assert ranks.run(2, __file__, "scenario_all_gather", venv, python=py,
                     env=_user_env()) == [0, 1]


def test_torch_backend_on_the_installed_copy(installed):
    py, _ = installed
    venv = os.path.dirname(os.path.dirname(py))
    assert ranks.run(2, __file__, "scenario_backend", venv, python=py, env=_user_env(),
                     timeout=180) == [0, 1]


def test_editable_install(tmp_path):
    """pip install -e: the modules come from python/ofccl, the library and
    the extension from meson-python's build directory (rebuilt on import)."""
    py = _make_venv(tmp_path / "venv")
    env = _user_env()
    ver = _run([py, "-c", "import mesonpy; print(mesonpy.__version__, "
                "hasattr(mesonpy, 'build_editable'))"], 60, env=env).split()
    if ver[1] != "True":
        pytest.skip(f"meson-python {ver[0]} has no editable installs (0.13 and later have)")
    build = tmp_path / "build"
    _run([py, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
          f"--config-settings=build-dir={build}", "-e", ROOT], 600, env=env)
    out = _run([py, "-c", "import ofccl, ofccl._lib as L\n"
                "print(ofccl.__file__, L.lib()._name, L.fast().__file__)"], 120, env=env,
               cwd=str(tmp_path))
    init, lib, fast = out.split()
    assert init == os.path.join(PKG, "__init__.py")
    assert lib.startswith(str(build) + os.sep) and fast.startswith(str(build) + os.sep), out
