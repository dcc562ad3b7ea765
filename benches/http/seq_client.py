#!/usr/bin/env python3
"""Sequential keep-alive HTTP/1.1 client for benches/http/callgrind.sh.

    seq_client.py HOST PORT COUNT [KEYS]

Sends COUNT GET / requests one after the other on one connection, each
after the previous answer was read in full. With KEYS > 0, request i carries
the header `x-client: c<i mod KEYS>` (the bench server's BENCH_KEY=header),
so the keys cycle through a fixed set. Prints "STATUS COUNT" per status code
seen. Only the server's side is measured, so this client's speed does not
matter; it only has to be exact about how many requests it sent.
"""

import socket
import sys


def main() -> int:
    host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    keys = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\n"
    statuses: dict[int, int] = {}
    buf = b""
    for i in range(count):
        req = head + (f"x-client: c{i % keys}\r\n" if keys else "") + "\r\n"
        sock.sendall(req.encode())
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                print(f"connection closed after {i} responses", file=sys.stderr)
                return 1
            buf += chunk
        header, buf = buf.split(b"\r\n\r\n", 1)
        lines = header.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(buf) < length:
            chunk = sock.recv(65536)
            if not chunk:
                print("connection closed inside a body", file=sys.stderr)
                return 1
            buf += chunk
        buf = buf[length:]
        statuses[status] = statuses.get(status, 0) + 1
    sock.close()
    for status, n in sorted(statuses.items()):
        print(status, n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
