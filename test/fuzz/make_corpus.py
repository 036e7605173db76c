#!/usr/bin/env python3
"""Write the seed corpora for the fuzz targets (valid inputs and near misses).
Run from the repository root; the files are committed, libFuzzer adds to them."""
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'corpus')
MAGIC, VERSION = 0x4243464F, 3


def blob(kind, rank, payload, version=VERSION, magic=MAGIC, length=None, crc=None):
    length = len(payload) if length is None else length
    crc = zlib.crc32(payload) if crc is None else crc
    return struct.pack('<IHHIII', magic, version, kind, rank, length, crc) + payload


def write(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, name), 'wb') as f:
        f.write(data)


# size, comm id, signal, strict, cq data, settings, name length; provider, host;
# control region; the settings that must agree; the endpoint name.
setup = struct.pack('<7I', 4, 1, 1, 0, 8, 2, 13) + b'tcp;ofi_rxm'.ljust(64, b'\0') + \
    b'node1'.ljust(64, b'\0') + struct.pack('<3Q', 0, 0x1234, 4096 + 80 * 8 * 4) + \
    struct.pack('<2Q', 524288, 16384) + b'ofccl_1234_0\0'
region = struct.pack('<3Q', 0, 0xdeadbeef, 1 << 20)
for i, (rank, data) in enumerate([
        (0, blob(1, 0, setup)), (2, blob(2, 2, region)), (1, blob(1, 1, b'')),
        (3, blob(1, 3, setup, version=VERSION + 1)), (0, blob(1, 0, setup, crc=1)),
        (0, blob(1, 0, setup, length=9999)), (5, blob(2, 4, region)),
        (0, blob(2, 0, region, magic=0)), (0, blob(1, 0, setup)[:10])]):
    write('blob', 'seed%02d' % i, bytes([rank]) + data)

for i, (pid, text) in enumerate([
        (0, 'debug'), (0, 'loud'), (1, 'core,prov'), (1, 'all,bogus'), (2, 'tcp'),
        (4, 'yes'), (4, 'maybe'), (7, '1500'), (7, '12abc'), (7, '99999999999999999999'),
        (18, '512K'), (18, '1G'), (18, '3X'), (21, '-5'), (0, 'PROVIDER=shm\nSTRICT=1\nX=y')]):
    write('config', 'seed%02d' % i, bytes([pid]) + text.encode())

# Descriptors: {seq, fingerprint, count, base, key, len, offset, rank, premul
# scalar bits, layout hash, tensors, layout offset}; the expectation word packs
# seq:16, fingerprint:8 (bits 16-23), need:16 (bits 24-39), bucket:1, tensors:8, hash:15.
def expect(seq, fp, need=0, bucket=0, ntensors=0, lhash=0):
    return seq | fp << 16 | need << 24 | bucket << 40 | ntensors << 41 | lhash << 49


for i, (d, x, words) in enumerate([
        ((7, 0x11, 7, 0, 0x99, 1 << 20, 0, 1, 0, 0, 0, 0), expect(7, 0x11), [0x3000_0008]),
        ((7, 0x11, 7, 0, 0x99, 64, 0, 1, 0, 0, 0, 0), expect(7, 0x11, 100), [0x1_0000_0000]),
        ((8, 0x11, 7, 0, 0x99, 1 << 20, 0, 1, 0, 0, 0, 0), expect(7, 0x11), [0xffff_ffff]),
        ((7, 0x11, 7, 0, 0x99, 100, 200, 2, 0, 0, 0, 0), expect(7, 0x11), [0]),
        ((7, 0x11, 7, 0, 0x99, 1 << 20, 0, 1, 0, 5, 2, 4096), expect(7, 0x11, 0, 1, 2, 5), []),
        ((7, 0x11, 7, 0, 0x99, 1 << 20, 0, 1, 0, 6, 2, 4096), expect(7, 0x11, 0, 1, 2, 5), []),
        ((7, 0x11, 7, 0, 0x99, 1 << 20, 0, 1, 0, 5, 3, 4096), expect(7, 0x11, 0, 1, 2, 5), []),
        ((7, 0x11, 7, 0, 0x99, 1 << 20, 0, 1, 1 << 62, 0, 0, 0), expect(7, 0x11), []),
        ((0,) * 12, 0, [0x4000_0011, 0x2000_0000])]):
    write('desc', 'seed%02d' % i, struct.pack('<12Q', *d) + struct.pack('<Q', x) +
          b''.join(struct.pack('<Q', w) for w in words))
