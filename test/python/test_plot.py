"""perf/plot: its parsers read the fixtures in test/data/plot/ into the series and points
written there by hand, and the charts it draws from them are PNGs of the expected size
with the expected lines."""
import importlib.machinery
import importlib.util
import os
import struct

import pytest


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "test", "data", "plot")
K, M = 1024, 1 << 20


def load_plot():
    path = os.path.join(ROOT, "perf", "plot")
    loader = importlib.machinery.SourceFileLoader("ofccl_plot", path)
    spec = importlib.util.spec_from_loader("ofccl_plot", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


plot = load_plot()


def fx(*names):
    return [os.path.join(DATA, n) for n in names]


def charts_of(*names, ceiling=None):
    data = plot.load(fx(*names), os.path.join(DATA, ceiling) if ceiling else None)
    return data, {coll: dict(chart) for coll, chart in plot.series(data).items()}


def test_printed_table():
    # Four runs in one file; the row before the first header belongs to no run.
    _, charts = charts_of("ofccl_perf.txt")
    assert set(charts) == {"ag", "rs"}
    assert charts["ag"] == {
        "ofccl-local": [(1 * K, 2.226), (4 * K, 5.851), (16 * K, 6.827)],
        "ofccl-local in-place": [(4 * K, 6.827), (16 * K, 10.240)],
        "ofccl-tcp": [(1 * K, 0.039), (4 * K, 0.149), (16 * K, 0.500)],
        "mpi-vader": [(1 * K, 1.384), (4 * K, 4.357), (16 * K, 4.312)],
    }
    assert charts["rs"] == {"ofccl-local": [(1 * K, 1.969), (4 * K, 7.314), (16 * K, 9.102)]}
    # ofccl first, then the other libraries.
    assert list(plot.series(plot.load(fx("ofccl_perf.txt")))["ag"])[-1] == "mpi-vader"


def test_json():
    data, charts = charts_of("ofccl_perf.json")
    assert charts == {"ag": {"ofccl-shm": [(1 * M, 4.3866), (2 * M, 4.5100)]},
                      "rs": {"ofccl-shm": [(1 * M, 3.9900)]}}
    assert {r.meta["type"] for r in data.rows if r.coll == "rs"} == {"bf16"}
    assert plot.ranks_of(data, "ag") == {2}


def test_mixed_inputs_label_the_variant():
    # With the f32 table next to it, the bf16 series says so; f32 goes unsaid.
    _, charts = charts_of("ofccl_perf.txt", "ofccl_perf.json")
    assert set(charts["rs"]) == {"ofccl-local", "ofccl-shm bf16"}
    assert set(charts["ag"]) == {"ofccl-local", "ofccl-local in-place", "ofccl-shm",
                                 "ofccl-tcp", "mpi-vader"}


def test_compare_directory():
    data, charts = charts_of("compare")
    # 1 MiB on local was measured in three rounds (33.4, 20.1, 41.0 us): the
    # median-time round's busbw is kept, not the best or the mean.
    assert charts["ag"]["ofccl-local"] == [(1 * M, 15.6973), (2 * M, 24.9186)]
    assert charts["ag"]["ofccl-local in-place"] == [(1 * M, 43.0097), (2 * M, 57.1742)]
    assert charts["ag"]["mpi-vader"] == [(1 * M, 4.8649), (2 * M, 5.4153)]
    assert set(charts["ag"]) == {"ofccl-local", "ofccl-local in-place", "ofccl-shm",
                                 "mpi-vader"}
    assert charts["rs"]["ofccl-local bf16"] == [(1 * M, 24.6492), (2 * M, 26.1490)]
    assert set(charts["rs"]) == {"ofccl-local", "ofccl-local bf16", "ofccl-shm"}
    # All-gather: every path's ceiling is memcpy(B): one line; and memcpy(B)/2.
    assert plot.ceiling_lines(data, "ag") == [
        ("memcpy(B) = ceiling of ofccl-local, ofccl-shm, ofccl-local-inplace",
         [(1 * M, 93.65), (2 * M, 54.23)], ["ofccl-local", "ofccl-shm", "ofccl-local-inplace"]),
        ("memcpy(B)/2", [(1 * M, 46.825), (2 * M, 27.115)], [])]
    # Reduce-scatter: memcpy(B) and three distinct ceilings (pull, push, bf16 pull).
    rs = plot.ceiling_lines(data, "rs")
    assert [(label, pts) for label, pts, _ in rs] == [
        ("memcpy(B)", [(1 * M, 93.65), (2 * M, 54.23)]),
        ("ceiling of ofccl-local", [(1 * M, 39.8), (2 * M, 33.9)]),
        ("ceiling of ofccl-shm", [(1 * M, 27.9), (2 * M, 20.8)]),
        ("ceiling of ofccl-local-bf16", [(1 * M, 35.91), (2 * M, 33.25)]),
    ]


def test_compare_printed_tables():
    # perf/compare's printed result: busbw tables as they are, latency tables
    # (us per call) as busbw = S / t * (n-1)/n, a "-" cell as not measured.
    data, charts = charts_of("compare.txt")

    def lat(size, us):
        return pytest.approx(size / (us * 1e3) / 2)

    ag, rs = charts["ag"], charts["rs"]
    assert set(ag) == {"ofccl-local", "ofccl-local in-place", "ofccl-shm", "ofccl-tcp",
                       "mpi-vader", "mpi-vader-nocma", "mpi-tcp"}
    assert ag["ofccl-local"] == [(8, lat(8, 0.20)), (16, lat(16, 0.18)), (1 * M, 15.72),
                                 (2 * M, 24.92)]
    assert ag["mpi-vader"] == [(8, lat(8, 0.20)), (16, lat(16, 0.21)), (1 * M, 9.73),
                               (2 * M, 10.83)]
    assert ag["mpi-vader-nocma"] == [(1 * M, 13.69)]
    assert ag["mpi-tcp"] == [(1 * M, 3.62), (2 * M, 3.92)]
    assert ag["ofccl-local in-place"] == [(1 * M, 43.02), (2 * M, 57.17)]
    assert rs["ofccl-tcp"] == [(8, lat(8, 13.50)), (16, lat(16, 13.54)), (1 * M, 4.09),
                               (2 * M, 3.50)]
    assert rs["ofccl-local bf16"] == [(1 * M, 24.65), (2 * M, 26.15)]
    assert set(rs) == {"ofccl-local", "ofccl-local bf16", "ofccl-shm", "ofccl-tcp",
                       "mpi-vader", "mpi-vader-nocma", "mpi-tcp"}
    assert [(label, pts) for label, pts, _ in plot.ceiling_lines(data, "ag")] == [
        ("memcpy(B) = ceiling of ofccl-local, ofccl-shm, ofccl-tcp, ofccl-local-inplace",
         [(1 * M, 93.65), (2 * M, 54.23)]),
        ("memcpy(B)/2", [(1 * M, 46.82), (2 * M, 27.12)])]
    # "push/pull" holds two ceilings: push for shm and tcp, pull for local.
    assert [(label, pts) for label, pts, _ in plot.ceiling_lines(data, "rs")] == [
        ("memcpy(B)", [(1 * M, 93.65), (2 * M, 54.23)]),
        ("ceiling of ofccl-shm, ofccl-tcp", [(1 * M, 27.9), (2 * M, 20.8)]),
        ("ceiling of ofccl-local", [(1 * M, 39.8), (2 * M, 33.9)]),
        ("ceiling of ofccl-local-bf16", [(1 * M, 35.91), (2 * M, 33.25)])]


def test_ceiling_csv_by_block_size():
    # perf/ceiling measures per block B; at 2 ranks the line sits at S = 2 B.
    data, _ = charts_of("ofccl_perf.txt", ceiling="ceiling.csv")
    assert plot.ceiling_lines(data, "ag") == [
        ("memcpy(B)", [(1 * K, 40.0), (4 * K, 50.0), (16 * K, 60.0)], [])]


def test_no_line_across_unmeasured_sizes():
    # 8 and 16 B measured, then 1 MiB: the line breaks between 16 B and 1 MiB.
    xs, ys = plot.gaps([(8, 1.0), (16, 2.0), (1 * M, 3.0), (2 * M, 4.0)])
    assert xs[:2] == [8, 16] and xs[3:] == [1 * M, 2 * M] and 16 < xs[2] < 1 * M
    assert ys[:2] == [1.0, 2.0] and ys[2] != ys[2] and ys[3:] == [3.0, 4.0]


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    assert head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


def test_charts(tmp_path, capsys):
    import matplotlib.image

    out = tmp_path / "img"
    rc = plot.main([os.path.join(DATA, "compare"), "--out", str(out), "--title", "fixture"])
    assert rc == 0
    pngs = sorted(p.name for p in out.iterdir())
    assert pngs == ["busbw-ag.png", "busbw-rs.png"]
    for name in pngs:
        path = out / name
        assert png_size(path) == (1100, 550)
        assert 10_000 < path.stat().st_size < 1_000_000
        # Something was drawn: many colours, not a blank canvas.
        img = matplotlib.image.imread(str(path))
        colours = {tuple(px) for px in img.reshape(-1, img.shape[-1])[::7].tolist()}
        assert len(colours) > 50
    printed = capsys.readouterr().out
    assert "busbw-ag.png: 6 lines" in printed and "busbw-rs.png: 7 lines" in printed
    # Measured series solid (ofccl) or dotted (MPI); every ceiling dashed.
    data = plot.load([os.path.join(DATA, "compare")])
    drawn = plot.draw(data, str(tmp_path / "again"))
    ag = dict(drawn[str(tmp_path / "again" / "busbw-ag.png")])
    assert ag == {"ofccl-local": "-", "ofccl-local in-place": "-", "ofccl-shm": "-",
                  "mpi-vader": ":",
                  "memcpy(B) = ceiling of ofccl-local, ofccl-shm, ofccl-local-inplace": "--",
                  "memcpy(B)/2": "--"}


def test_list_and_errors(tmp_path, capsys):
    assert plot.main(["--list", os.path.join(DATA, "ofccl_perf.txt")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "ag\tofccl-local\t3 points\t1K-16K" in lines
    assert "rs\tofccl-local\t3 points\t1K-16K" in lines
    assert len(lines) == 5
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing measured here\n")
    assert plot.main(["--out", str(tmp_path), str(empty)]) == 1
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,c,d\n1,2,3,4\n")
    assert plot.main(["--out", str(tmp_path), str(bad)]) == 1
    assert "not a benchmark, ratios or ceiling CSV" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.png"))
