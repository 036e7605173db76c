"""perf/compare's all-gather and reduce-scatter tables and plot: the ceilings
in busbw units (perf/compare's docstring defines them), the ratio tables
(busbw and latency) and the gnuplot chart."""
import csv
import os
import shutil
import subprocess

MIB = 1 << 20


def fmt_size(n):
    for unit, div in (("G", 1 << 30), ("M", MIB), ("K", 1024)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit)
    return str(n)


def short(path):
    """A path relative to the current directory when that is shorter."""
    if not path.startswith("/"):
        return path
    rel = os.path.relpath(path)
    return rel if len(rel) < len(path) else path

def kernel_rate(ceil, block, dtype):
    """The reduction rate at `block` bytes: ofccl's kernel where measured, else
    ceiling's approximation of it."""
    c = ceil[block]
    lib = c[6] if dtype == "bf16" else c[5]
    return lib if lib > 0 else (c[2] if dtype == "bf16" else c[1])


def ceiling_busbw(ceil, coll, size, nranks=2, dtype="f32", pull=False):
    """The bound (module docstring) for a transfer of `size` bytes; reduce-scatter
    pushing (copy the block out, reduce the one received) or, `pull`, reading
    the peer's block in place (one reduction pass)."""
    block = size // nranks
    if block not in ceil:
        return None
    mem, red = ceil[block][0], kernel_rate(ceil, block, dtype)
    if coll == "ag":
        return mem
    if pull:
        return red if red > 0 else None
    return 1.0 / (1.0 / mem + 1.0 / red) if mem > 0 and red > 0 else None


def memcpy_busbw(ceil, size, nranks=2):
    """memcpy(B) at the block size: the unit the issue's targets are stated in."""
    c = ceil.get(size // nranks)
    return c[0] if c and c[0] > 0 else None


def memcpy2_busbw(ceil, size, nranks=2):
    """memcpy(B) per core while both cores copy: what an in-place all-gather,
    where both ranks copy at once, can reach on this machine."""
    c = ceil.get(size // nranks)
    return c[3] if c and c[3] > 0 else None


def tcp_busbw(ceil, size, nranks=2):
    """Loopback TCP, both ways at once, at the block size (bytes received per
    second per side = busbw of a 2-rank all-gather moving only that)."""
    c = ceil.get(size // nranks)
    return c[4] if c and c[4] > 0 else None


def half(v):
    return v / 2 if v else None


def ratio(a, b, width=6):
    return "%*.2f" % (width, a / b) if a is not None and b else " " * (width - 1) + "-"


def bw(rows, size):
    r = rows.get(size)
    return float(r["busbw_GBps"]) if r else None


def lat(rows, size):
    r = rows.get(size)
    return float(r["time_us"]) if r else None


def num(v, f="%8.2f"):
    return f % v if v is not None else " " * (len(f % 0) - 1) + "-"


OFCCL_PATHS = ("ofccl-local", "ofccl-shm", "ofccl-tcp")
MPI_PATHS = ("mpi-vader", "mpi-vader-nocma", "mpi-tcp")


def bw_sizes():
    size = MIB
    while size <= 64 * MIB:
        yield size
        size *= 2


def tables(data, ceil, xchg, out_dir):
    lines = []
    ratio_rows = []

    def ratio_row(coll, size, path, v, best, c, dtype="f32", place="out-of-place"):
        def q(a, b):
            return a / b if a and b else ""
        mem = memcpy_busbw(ceil, size)
        ratio_rows.append([coll, size, path, v, best, c, q(v, best), q(v, c), dtype, place, mem,
                           q(v, mem), q(v, half(mem))])

    # Out of place, f32, every path. The third ratio column: all-gather against
    # memcpy(B)/2 (the out-of-place bound), reduce-scatter against memcpy(B)
    # (the unit of the target).
    for coll, title in (("ag", "all-gather"), ("rs", "reduce-scatter")):
        mpi = [data.get((p, coll), {}) for p in MPI_PATHS]
        ours = [data.get((p, coll), {}) for p in OFCCL_PATHS]
        extra, third = ("ceil/2", "vsC/2") if coll == "ag" else ("memcpy", "vsMem")
        lines.append("")
        lines.append("%s, busbw GB/s, 2 ranks, f32%s, out of place; ratios: ofccl / best MPI, "
                     "ofccl / ceiling, ofccl / %s" % (title, ", sum" if coll == "rs" else "",
                                                      extra))
        if coll == "ag":
            lines.append("  ceiling = memcpy(B), B = S/2 (each core copies its block once: the "
                         "in-place bound); ceil/2 = memcpy(B)/2 (out of place each core also "
                         "copies its own block)")
        else:
            lines.append("  ceiling = 1/(1/memcpy(B) + 1/sum_f32(B)) (push: copy the block out, "
                         "reduce the one received), for shm and tcp; pull = sum_f32(B) (read the "
                         "peer's block in place: one reduction pass), for local; sum_f32 = "
                         "ofccl's kernel (ofccl_info -k); memcpy = memcpy(B), the unit of the "
                         "target")
        lines.append("%5s %7s %7s %7s %7s %7s |" % ("size", "vader", "v-nocma", "tcp",
                                                    "ceiling" if coll == "ag" else "push/pull",
                                                    extra)
                     + " |".join(" %11s %5s %6s %5s" % (p, "vsMPI", "vsCeil", third)
                                 for p in OFCCL_PATHS))
        lines.append("%5s %7s %7s %7s %7s %7s |" % ("", "(MPI)", "(MPI)", "(MPI)", "", ""))
        for size in bw_sizes():
            m = [bw(x, size) for x in mpi]
            best = max([x for x in m if x is not None], default=None)
            c = ceiling_busbw(ceil, coll, size)
            cpull = ceiling_busbw(ceil, coll, size, pull=True)
            c3 = half(c) if coll == "ag" else memcpy_busbw(ceil, size)
            cells = []
            for path, rows in zip(OFCCL_PATHS, ours):
                v, cp = bw(rows, size), cpull if path == "ofccl-local" else c
                cells.append(" %11s %5s %6s %5s" % (num(v, "%11.2f"), ratio(v, best, 5),
                                                    ratio(v, cp), ratio(v, c3, 5)))
                ratio_row(coll, size, path, v, best, cp)
            cell = num(c, "%7.2f") if coll == "ag" else (
                "%s/%s" % (num(c, "%.1f"), num(cpull, "%.1f")))
            lines.append("%5s %s %7s %7s |" % (fmt_size(size), " ".join(num(x, "%7.2f") for x in m),
                                               cell, num(c3, "%7.2f"))
                         + " |".join(cells))

    # In-place all-gather on local, next to its out-of-place figure.
    inp, oop = data.get(("ofccl-local-inplace", "ag"), {}), data.get(("ofccl-local", "ag"), {})
    lines.append("")
    lines.append("all-gather in place (sendbuf = recvbuf + rank * B), ofccl-local, busbw GB/s, "
                 "2 ranks, f32; ceiling = memcpy(B), ceil/2 = memcpy(B)/2")
    lines.append("  2core = memcpy(B) per core while the other core copies too (both ranks copy "
                 "at once in a collective)")
    lines.append("  xchg = both cores copying their block into the other's output at once, a "
                 "barrier per round (ceiling -X): the same copies with no protocol")
    lines.append("%5s %7s %7s %7s %7s | %9s %6s %6s %6s | %12s %6s %5s | %6s" % (
        "size", "ceiling", "ceil/2", "2core", "xchg", "in-place", "vsCeil", "vs2c", "vsXchg",
        "out-of-place", "vsCeil", "vsC/2", "in/out"))
    for size in bw_sizes():
        c, c2 = ceiling_busbw(ceil, "ag", size), memcpy2_busbw(ceil, size)
        x = xchg.get(size // 2) or None
        a, b = bw(inp, size), bw(oop, size)
        lines.append("%5s %7s %7s %7s %7s | %9s %6s %6s %6s | %12s %6s %5s | %6s" % (
            fmt_size(size), num(c, "%7.2f"), num(half(c), "%7.2f"), num(c2, "%7.2f"),
            num(x, "%7.2f"), num(a, "%9.2f"), ratio(a, c), ratio(a, c2), ratio(a, x),
            num(b, "%12.2f"), ratio(b, c), ratio(b, half(c), 5), ratio(a, b)))
        ratio_row("ag", size, "ofccl-local-inplace", a, None, c, place="in-place")

    # All-gather over loopback TCP: ofccl-tcp and MPI-tcp against the kernel's rate.
    ot, mt = data.get(("ofccl-tcp", "ag"), {}), data.get(("mpi-tcp", "ag"), {})
    lines.append("")
    lines.append("all-gather over loopback TCP, busbw GB/s, 2 ranks, f32; tcp = two processes "
                 "sending each other B bytes at once over one loopback connection (best of 3)")
    lines.append("%5s %7s | %9s %9s | %6s %6s %6s" % ("size", "tcp", "ofccl-tcp", "mpi-tcp",
                                                     "vsMPI", "vsTcp", "MPIvsT"))
    for size in bw_sizes():
        c, a, m = tcp_busbw(ceil, size), bw(ot, size), bw(mt, size)
        lines.append("%5s %7s | %9s %9s | %6s %6s %6s" % (
            fmt_size(size), num(c, "%7.2f"), num(a, "%9.2f"), num(m, "%9.2f"), ratio(a, m),
            ratio(a, c), ratio(m, c)))

    # bf16 reduce-scatter on local: against memcpy(B) (target >= 0.5) and the bf16 ceiling.
    r16, r32 = data.get(("ofccl-local-bf16", "rs"), {}), data.get(("ofccl-local", "rs"), {})
    lines.append("")
    lines.append("reduce-scatter bf16, sum, ofccl-local, busbw GB/s, 2 ranks; ratios: / memcpy(B) "
                 "(target >= 0.5), / bf16 ceiling")
    lines.append("  ceil-bf16 = sum_bf16(B), ofccl's kernel (local reads the peer's block in "
                 "place: one reduction pass); f32 = the same path in f32, for reference")
    lines.append("%5s %7s %9s | %9s %5s %6s | %7s" % ("size", "memcpy", "ceil-bf16", "bf16",
                                                      "vsMem", "vsCeil", "f32"))
    for size in bw_sizes():
        mem = memcpy_busbw(ceil, size)
        c = ceiling_busbw(ceil, "rs", size, dtype="bf16", pull=True)
        v = bw(r16, size)
        lines.append("%5s %7s %9s | %9s %5s %6s | %7s" % (
            fmt_size(size), num(mem, "%7.2f"), num(c, "%9.2f"), num(v, "%9.2f"),
            ratio(v, mem, 5), ratio(v, c), num(bw(r32, size), "%7.2f")))
        ratio_row("rs", size, "ofccl-local-bf16", v, None, c, dtype="bf16")

    for coll, title in (("ag", "all-gather"), ("rs", "reduce-scatter")):
        mv = data.get(("mpi-vader", coll), {})
        ours = [data.get((p, coll), {}) for p in OFCCL_PATHS]
        lines.append("")
        lines.append("%s latency, us per call, 2 ranks, f32; ratio = ofccl / MPI vader" % title)
        lines.append("%8s %9s |" % ("size", "mpi-vader")
                     + " |".join(" %11s %6s" % (p, "ratio") for p in OFCCL_PATHS))
        size = 8
        while size <= 4096:
            m = lat(mv, size)
            lines.append("%8s %9s |" % (fmt_size(size), num(m, "%9.2f"))
                         + " |".join(" %11s %6s" % (num(lat(x, size), "%11.2f"),
                                                     ratio(lat(x, size), m)) for x in ours))
            size *= 2
    with open(os.path.join(out_dir, "ratios.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["coll", "size", "path", "busbw_GBps", "best_mpi_GBps", "ceiling_GBps",
                    "vs_mpi", "vs_ceiling", "type", "place", "memcpy_GBps", "vs_memcpy",
                    "vs_half_memcpy"])
        w.writerows(ratio_rows)
    return lines


def plot(data, ceil, out_dir):
    """busbw vs size for every path, one panel per collective, via gnuplot."""
    if not shutil.which("gnuplot"):
        return "gnuplot not found: no plot"
    base = list(OFCCL_PATHS) + list(MPI_PATHS)
    # (series, title) per panel; the ceilings follow as dashed lines.
    panels = {
        "ag": ([(p, p) for p in base] + [("ofccl-local-inplace", "ofccl-local in-place")],
               [("memcpy(B): ceiling", lambda s: ceiling_busbw(ceil, "ag", s)),
                ("memcpy(B)/2: out-of-place ceiling",
                 lambda s: half(ceiling_busbw(ceil, "ag", s)))]),
        "rs": ([(p, p) for p in base] + [("ofccl-local-bf16", "ofccl-local bf16")],
               [("f32 push ceiling (shm, tcp)", lambda s: ceiling_busbw(ceil, "rs", s)),
                ("f32 pull ceiling (local)", lambda s: ceiling_busbw(ceil, "rs", s, pull=True)),
                ("bf16 pull ceiling (local)",
                 lambda s: ceiling_busbw(ceil, "rs", s, dtype="bf16", pull=True))]),
    }
    for coll, (series, ceils) in panels.items():
        with open(os.path.join(out_dir, "busbw_%s.dat" % coll), "w") as f:
            f.write("# size " + " ".join(p for p, _ in series) + " " +
                    " ".join(t.replace(" ", "_") for t, _ in ceils) + "\n")
            sizes = sorted({s for p, _ in series for s in data.get((p, coll), {})})
            for s in sizes:
                vals = [bw(data.get((p, coll), {}), s) for p, _ in series]
                vals += [fn(s) for _, fn in ceils]
                f.write("%d %s\n" % (s, " ".join("%.4f" % v if v else "NaN" for v in vals)))
    png = os.path.join(out_dir, "busbw.png")
    gp = os.path.join(out_dir, "busbw.gp")
    with open(gp, "w") as f:
        f.write('set terminal pngcairo size 1600,700 font ",10"\nset output "%s"\n' % png)
        f.write('set datafile missing "NaN"\nset logscale xy\nset grid\nset key right bottom\n'
                'set xlabel "size (bytes of gathered buffer / reduce input)"\n'
                'set ylabel "busbw (GB/s)"\nset format x "%.0s%cB"\n'
                "set multiplot layout 1,2\n")
        for coll, title in (("ag", "all-gather, f32"),
                            ("rs", "reduce-scatter, sum, f32 unless said")):
            series, ceils = panels[coll]
            dat = os.path.join(out_dir, "busbw_%s.dat" % coll)
            f.write('set title "%s, 2 ranks"\n' % title)
            cols = ['"%s" using 1:%d with linespoints title "%s"' % (dat, i + 2, t)
                    for i, (p, t) in enumerate(series) if data.get((p, coll))]
            cols += ['"%s" using 1:%d with lines dashtype %d lw 2 lc rgb "black" title "%s"'
                     % (dat, len(series) + 2 + k, 2 + k, t) for k, (t, _) in enumerate(ceils)]
            f.write("plot %s\n" % ", ".join(cols))
        f.write("unset multiplot\n")
    p = subprocess.run(["gnuplot", gp], capture_output=True, text=True, timeout=60)
    return "plot: %s" % short(png) if p.returncode == 0 else \
        "gnuplot failed: " + p.stderr.strip()
