#!/usr/bin/python3
"""A known 2-rank run with OFCCL_TRACE: the files parse as JSON and hold the
expected spans; ofccl-trace merge reports the expected collectives; a tiny
buffer drops events and the file says so.

Usage: check_trace.py <test_observe> <ofccl-trace> <provider>
"""
import json
import os
import xml.dom.minidom
import subprocess
import sys
import tempfile

MIB = 1 << 20
CHUNK = 512 << 10
# seq: (op, category, bytes of the gathered / reduced buffer)
EXPECTED = {0: ("all-gather", "coll", 2 * MIB), 1: ("all-gather", "coll", 2 * MIB),
            2: ("all-gather", "coll", 2 * MIB), 3: ("reduce-scatter", "coll", 2 * MIB),
            4: ("reduce-scatter", "coll", 2 * MIB), 5: ("all-gather", "bucket", None)}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def run_workload(exe, provider, tracedir, events=None):
    # The checks below are the direct all-gather's spans: no rank may take a
    # late peer's blocks instead (OFCCL_AG_TAKE, on the local transport, as
    # timing decides).
    env = dict(os.environ, OFCCL_TRACE=tracedir, OFCCL_AG_TAKE="0")
    if events:
        env["OFCCL_TRACE_EVENTS"] = str(events)
    r = subprocess.run([exe, provider, "workload"], env=env, timeout=300)
    check(r.returncode == 0, "workload exited %d" % r.returncode)
    files = sorted(f for f in os.listdir(tracedir) if f.endswith(".json"))
    check(len(files) == 2, "2 trace files expected, found %s" % files)
    return [os.path.join(tracedir, f) for f in files]


def check_rank_file(path):
    with open(path) as f:
        d = json.load(f)  # parses as JSON, or this raises
    meta = d["otherData"]
    rank, peer = meta["rank"], 1 - meta["rank"]
    check(os.path.basename(path).endswith("-%d.json" % rank), "file name names rank %d" % rank)
    check(meta["size"] == 2 and meta["dropped_events"] == 0, "%s: size 2, nothing dropped" % path)
    check(meta["clock_offset_ns"] == 0 and meta["clock_offset_method"] == "same host as rank 0",
          "%s: one host, offset 0 (%s)" % (path, meta["clock_offset_method"]))
    xs = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    check(all(e["pid"] == rank and e["dur"] >= 0 for e in xs), "pid = rank, durations >= 0")
    colls = {e["args"]["seq"]: e for e in xs if e["cat"] in ("coll", "bucket")}
    check(sorted(colls) == sorted(EXPECTED), "rank %d: collectives %s" % (rank, sorted(colls)))
    for seq, (op, cat, nbytes) in EXPECTED.items():
        e = colls.get(seq)
        if e is None:
            continue
        check(e["args"]["op"] == op and e["cat"] == cat, "rank %d #%d is a %s %s" %
              (rank, seq, cat, op))
        check(nbytes is None or e["args"]["bytes"] == nbytes, "rank %d #%d: %s bytes, not %s" %
              (rank, seq, nbytes, e["args"]["bytes"]))
        check(e["args"]["transport"] and e["args"]["algorithm"], "transport and algorithm named")
        mine = [x for x in xs if x["args"]["seq"] == seq and x["cat"] in ("phase", "chunk")]
        check(all(x["ts"] >= e["ts"] - 1 and x["ts"] + x["dur"] <= e["ts"] + e["dur"] + 1
                  for x in mine), "rank %d #%d: every phase inside its collective" % (rank, seq))
        if seq > 2:
            continue
        # all-gather, direct, 2 ranks: this rank writes its 1 MiB block to the
        # peer in two 512 KiB chunks and receives the peer's
        chunks = [x for x in mine if x["cat"] == "chunk"]
        check(len(chunks) == MIB // CHUNK and all(x["args"]["peer"] == peer for x in chunks),
              "rank %d #%d: %d chunks to rank %d, got %s" % (rank, seq, MIB // CHUNK, peer,
                                                          [(x["args"]["peer"]) for x in chunks]))
        check(sum(x["args"]["bytes"] for x in chunks) == MIB, "chunk bytes add up to 1 MiB")
        by = {x["args"]["phase"]: x for x in mine if x["cat"] == "phase"}
        check({"descriptor", "send", "receive"} <= set(by) <= {"descriptor", "send", "receive",
                                                               "finish"}, "phases %s" % sorted(by))
        check(all(x["args"]["peer"] == (-1 if k == "finish" else peer) for k, x in by.items()),
              "phases name rank %d" % peer)
        check(by.get("send", {}).get("args", {}).get("bytes") == MIB, "send phase: 1 MiB")
        check(by.get("receive", {}).get("args", {}).get("units") == MIB // CHUNK,
              "receive phase: 2 units")


def main():
    exe, tool, provider = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        files = run_workload(exe, provider, tmp)
        for f in files:
            check_rank_file(f)
        merged, summary = os.path.join(tmp, "merged.out"), os.path.join(tmp, "summary.out")
        svg = os.path.join(tmp, "timeline.svg")
        r = subprocess.run([sys.executable, tool, "merge", "-o", merged, "--json", summary,
                            "--svg", svg, tmp],
                           capture_output=True, text=True, timeout=120)
        print(r.stdout, r.stderr)
        check(r.returncode == 0, "merge exited %d" % r.returncode)
        with open(summary) as f:
            ops = json.load(f)
        with open(merged) as f:
            check({e["pid"] for e in json.load(f)["traceEvents"]} == {0, 1}, "merged: both ranks")
        check([(o["seq"], o["op"]) for o in ops] == [(s, v[0]) for s, v in EXPECTED.items()],
              "merge reports %s" % [(o["seq"], o["op"]) for o in ops])
        for o in ops:
            path = o["critical_path"]
            check(o["ranks"] == [0, 1] and o["slowest_rank"] in (0, 1), "ranks of #%d" % o["seq"])
            check(path[0]["what"] == "posted" and path[-1]["what"] == "done" and
                  path[-1]["rank"] == o["slowest_rank"], "critical path of #%d: %s" %
                  (o["seq"], path))
            check(all(a["start_us"] <= b["end_us"] + 1 for a, b in zip(path, path[1:])),
                  "critical path of #%d in time order" % o["seq"])
        check("comm " in r.stdout and "critical path:" in r.stdout, "summary printed")
        rects = xml.dom.minidom.parse(svg).getElementsByTagName("rect")
        check(sum(x.getAttribute("stroke") == "black" for x in rects) >= len(ops),
              "the timeline picture outlines the critical paths")
    with tempfile.TemporaryDirectory() as tmp:  # a buffer too small: counted, and said
        for f in run_workload(exe, provider, tmp, events=16):
            with open(f) as fh:
                d = json.load(fh)
            check(d["otherData"]["events"] == 16 and d["otherData"]["dropped_events"] > 0,
                  "16-event buffer: %s" % d["otherData"])
            check(any("events dropped" in e["name"] for e in d["traceEvents"]),
                  "the file says events were dropped")
    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
