#!/usr/bin/env python3
"""Write the seed corpora for the fuzz targets (valid inputs and near misses).
Run from the repository root; the files are committed, libFuzzer adds to them."""
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'corpus')
MAGIC, VERSION = 0x4243464F, 1


def blob(kind, rank, payload, version=VERSION, magic=MAGIC, length=None, crc=None):
    length = len(payload) if length is None else length
    crc = zlib.crc32(payload) if crc is None else crc
    return struct.pack('<IHHIII', magic, version, kind, rank, length, crc) + payload


def write(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, name), 'wb') as f:
        f.write(data)


setup = struct.pack('<6I', 4, 1, 1, 0, 8, 13) + b'tcp;ofi_rxm'.ljust(64, b'\0') + \
    struct.pack('<3Q', 0, 0x1234, 4096 + 80 * 8 * 4) + b'ofccl_1234_0\0'
region = struct.pack('<3Q', 0, 0xdeadbeef, 1 << 20)
for i, (rank, data) in enumerate([
        (0, blob(1, 0, setup)), (2, blob(2, 2, region)), (1, blob(1, 1, b'')),
        (3, blob(1, 3, setup, version=2)), (0, blob(1, 0, setup, crc=1)),
        (0, blob(1, 0, setup, length=9999)), (5, blob(2, 4, region)),
        (0, blob(2, 0, region, magic=0)), (0, blob(1, 0, setup)[:10])]):
    write('blob', 'seed%02d' % i, bytes([rank]) + data)

for i, (pid, text) in enumerate([
        (0, 'debug'), (0, 'loud'), (1, 'core,prov'), (1, 'all,bogus'), (2, 'tcp'),
        (4, 'yes'), (4, 'maybe'), (7, '1500'), (7, '12abc'), (7, '99999999999999999999'),
        (18, '512K'), (18, '1G'), (18, '3X'), (21, '-5'), (0, 'PROVIDER=shm\nSTRICT=1\nX=y')]):
    write('config', 'seed%02d' % i, bytes([pid]) + text.encode())

for i, (d, seq, words) in enumerate([
        ((7, 0x1011, 16, 0, 0x99, 1 << 20, 0, 1), 7 | (0x1011 << 16), [0x3000_0008]),
        ((7, 0x1011, 16, 0, 0x99, 64, 0, 1), 7 | (0x1011 << 16), [0x1_0000_0000]),
        ((8, 0x1011, 16, 0, 0x99, 1 << 20, 0, 1), 7, [0xffff_ffff]),
        ((7, 0x1011, 16, 0, 0x99, 100, 200, 2), 7, [0]),
        ((0, 0, 0, 0, 0, 0, 0, 0), 0, [0x4000_0011, 0x2000_0000])]):
    write('desc', 'seed%02d' % i, struct.pack('<8Q', *d) + struct.pack('<Q', seq) +
          b''.join(struct.pack('<Q', w) for w in words))
