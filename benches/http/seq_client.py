#!/usr/bin/env python3
"""Sequential keep-alive HTTP/1.1 client for the scripts in benches/http/.

    seq_client.py HOST PORT COUNT [--keys K] [--run-at N COMMAND]... [--count-from N]

Sends COUNT `GET /` requests one after the other on one connection, each
after the previous answer was read in full. With K > 0, request i carries
the header `x-client: c<i mod K>` (the bench server's BENCH_KEY=header), so
the keys cycle through a fixed set. `--run-at N COMMAND` runs COMMAND (a
shell command) after the N-th answer, before the next request is sent
(callgrind.sh zeroes and dumps the server's counters this way); N may equal
COUNT. Prints "STATUS COUNT" per status code seen (from the N-th request
on, with --count-from N), and the first answer that was not 200 to stderr. Only the server's side is measured, so this
client's speed does not matter; it only has to be exact about what it sent.
"""

import argparse
import socket
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("--keys", type=int, default=0)
    parser.add_argument("--count-from", type=int, default=0)
    parser.add_argument("--run-at", nargs=2, action="append", default=[],
                        metavar=("N", "COMMAND"))
    args = parser.parse_args()
    hooks: dict[int, list[str]] = {}
    for n, command in args.run_at:
        hooks.setdefault(int(n), []).append(command)

    sock = socket.create_connection((args.host, args.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = f"GET / HTTP/1.1\r\nHost: {args.host}:{args.port}\r\n"
    statuses: dict[int, int] = {}
    shown = False
    buf = b""
    for i in range(args.count + 1):
        for command in hooks.get(i, []):
            subprocess.run(command, shell=True, check=True, stdout=subprocess.DEVNULL)
        if i == args.count:
            break
        key = f"x-client: c{i % args.keys}\r\n" if args.keys else ""
        sock.sendall((head + key + "\r\n").encode())
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
        if status != 200 and not shown:
            shown = True
            print(f"request {i}: {header.decode(errors='replace')}\r\n\r\n"
                  f"{buf[:length].decode(errors='replace')}", file=sys.stderr)
        buf = buf[length:]
        if i >= args.count_from:
            statuses[status] = statuses.get(status, 0) + 1
    sock.close()
    for status, n in sorted(statuses.items()):
        print(status, n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
