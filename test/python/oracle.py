"""Inputs every rank can compute for every rank, and numpy references.

Values are small multiples of 1/4, so every dtype holds them exactly and sums
over a few ranks stay exact; bf16 travels as uint16 bit patterns (numpy has
no bfloat16) converted here.
"""

import numpy as np

DTYPES = ["float32", "float64", "float16", "bfloat16", "uint8"]


def values(rank, count, salt=0):
    rng = np.random.default_rng(1000 * rank + salt)
    return rng.integers(-32, 32, count).astype(np.float64) / 4


def encode(v, dtype):
    """float64 values -> array of `dtype` (bf16 as uint16 bits)."""
    if dtype == "bfloat16":
        return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if dtype == "uint8":
        return (v * 4 + 128).astype(np.uint8)
    return v.astype(dtype)


def decode(a, dtype):
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype == "uint8":
        return (a.astype(np.float64) - 128) / 4
    return a.astype(np.float64)


def tolerance(dtype):
    return {"float32": 1e-6, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1e-2}.get(dtype, 0)


def reduce_ref(inputs, op, scalar=1.0):
    total = sum(inputs) if op != "premul" else sum(x * scalar for x in inputs)
    return total / len(inputs) if op == "avg" else total


def assert_close(got, want, dtype, what):
    tol = tolerance(dtype)
    bad = ~np.isclose(got, want, rtol=tol, atol=tol)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} wrong elements, first at {i}: got "
                             f"{got[i]}, want {want[i]}")
