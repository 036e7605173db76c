#!/usr/bin/env python3
"""The GPU section's chart (docs/performance.md): bus bandwidth against size
from a results file of the GPU runs (docs/data/gpu-4xh100.json): all-gather
and broadcast, ofccl against NCCL through torch, and the copy-engine path
against the copy engines' own ceiling.
Usage: perf/gpu_chart.py RESULTS.json OUT.svg"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    d = json.load(open(sys.argv[1]))
    fig, ax = plt.subplots(1, 3, figsize=(13, 4))
    mib = [s / (1 << 20) for s in d["sizes"]]
    b = d["bench"]
    for i, (op, title) in enumerate((("ag", "all-gather"), ("bc", "broadcast"))):
        ax[i].plot(mib, b["nccl_" + op], "o-", label="NCCL 2.28.9")
        ax[i].plot(mib, b["ofccl_" + op], "s-", label="ofccl (copy kernel, 16 SMs)")
        ax[i].set_title(f"{title}, 4 x H100, bf16 (through torch)")
    c = d["ce"]
    cm = [s / (1 << 20) for s in c["sizes"]]
    ax[2].plot(cm, c["ceiling"], "o-", label="copy engines alone (ceiling)")
    ax[2].plot(cm, c["ofccl_ag"], "s-", label="ofccl all-gather, OFCCL_GPU_SMS=0")
    ax[2].set_title("copy engines only (0 SMs), 4 x H100")
    for a in ax:
        a.set_xscale("log", base=2)
        a.set_xlabel("size (MiB, the gathered buffer)")
        a.set_ylabel("bus bandwidth (GB/s)")
        a.grid(True, alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2])


if __name__ == "__main__":
    main()
