#!/usr/bin/python3
"""One plain TCP stream, to measure what a link carries (the link ceiling).

  stream.py recv PORT SECONDS     accept one connection, read it to the end,
                                  print the rate; give up after SECONDS
  stream.py send ADDR PORT SECONDS connect (retrying for up to 10 s), send
                                  1 MiB writes for SECONDS, close

The receiver prints "rate_Bps=<bytes per second>", measured from 0.5 s after
the first byte to the last byte, so TCP's slow start and the token bucket's
initial burst stay out of the figure.
"""
import socket
import sys
import time

BLOCK = 1 << 20
SKIP_S = 0.5


def recv(port, limit_s):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    srv.settimeout(limit_s)
    conn, _ = srv.accept()
    conn.settimeout(limit_s)
    buf = bytearray(BLOCK)
    total = 0
    first = mark = None
    marked = 0
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        n = conn.recv_into(buf)
        if n == 0:
            break
        now = time.monotonic()
        if first is None:
            first = now
        total += n
        if mark is None and now - first >= SKIP_S:
            mark, marked = now, total
        last = now
    conn.close()
    srv.close()
    if mark is None or last <= mark:
        print("stream: too short to measure (%d bytes)" % total)
        return 1
    rate = (total - marked) / (last - mark)
    print("received %d bytes; steady %.1f MB/s" % (total, rate / 1e6))
    print("rate_Bps=%.0f" % rate)
    return 0


def send(addr, port, secs):
    deadline = time.monotonic() + 10
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    data = bytes(BLOCK)
    end = time.monotonic() + secs
    while time.monotonic() < end:
        sock.sendall(data)
    sock.close()
    return 0


def main(argv):
    if len(argv) == 4 and argv[1] == "recv":
        return recv(int(argv[2]), float(argv[3]))
    if len(argv) == 5 and argv[1] == "send":
        return send(argv[2], int(argv[3]), float(argv[4]))
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
