"""What one client may hold of the Envoy rate limit service, checked from
outside (the [rls] table's bounds):

  connections  from one address (127.0.0.2, raw sockets that send
               nothing): the first --per-client stay open, the next is
               closed at accept; once one closes, a new one is let in
  streams      quota streams (grpcio, Envoy's generated stubs): the first
               --max-streams are served, the next ends RESOURCE_EXHAUSTED
  silent-peer  (--silent-peer S) a raw socket that sends the HTTP/2
               preface and never reads is closed within S seconds (the
               server's keepalive interval and timeout, and a second)

Exit status 0 when every check holds, 1 with the first that does not.
"""

import argparse
import socket
import sys
import time

import grpc

from rlqs_client import WAIT, Envoy, Failed, check, new_user, report

CLIENT = "127.0.0.2"


def closed_within(sock, seconds):
    """True when the server closes sock within seconds (it sends nothing)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


def connect(host, port):
    sock = socket.socket()
    sock.bind((CLIENT, 0))
    sock.connect((host, port))
    return sock


def connections(args):
    host, port = args.addr.rsplit(":", 1)
    port = int(port)
    held = [connect(host, port) for _ in range(args.per_client)]
    extra = connect(host, port)
    check(closed_within(extra, WAIT), f"connections: connection {args.per_client + 1} from {CLIENT} was not closed within {WAIT:.0f} s")
    for i, s in enumerate(held):
        check(not closed_within(s, 0.2), f"connections: connection {i + 1} of {args.per_client} from {CLIENT} was closed")
    held.pop().close()
    time.sleep(0.2)  # the server sees the close
    again = connect(host, port)
    check(not closed_within(again, 1.0), "connections: a connection after one closed was refused")
    for s in held + [again, extra]:
        s.close()
    print(f"connections: {args.per_client} held from {CLIENT}, the next closed at accept, a place freed by a close")


def streams(args):
    envoys = []
    try:
        for i in range(args.max_streams):
            e = Envoy(args.addr, f"stream {i + 1}")
            envoys.append(e)
            bucket = {"user_id": new_user()}
            e.send(report(bucket, allowed=1))
            check(e.action_for(bucket, WAIT) is not None, f"streams: stream {i + 1} of {args.max_streams} got no answer")
        extra = Envoy(args.addr, "one stream too many")
        envoys.append(extra)
        ended = extra.wait_end(WAIT)
        check(
            isinstance(ended, grpc.RpcError) and ended.code() == grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"streams: stream {args.max_streams + 1}: {extra.describe_end()}, want RESOURCE_EXHAUSTED",
        )
    finally:
        for e in envoys:
            e.close()
    print(f"streams: {args.max_streams} served, the next RESOURCE_EXHAUSTED")


def silent_peer(args):
    host, port = args.addr.rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    # The client preface and an empty SETTINGS frame; then nothing is read.
    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
    start = time.monotonic()
    established = 1  # TCP_INFO's first byte, tcpi_state
    while time.monotonic() - start < args.silent_peer:
        time.sleep(0.1)
        if sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != established:
            print(f"silent-peer: a client that never reads closed after {time.monotonic() - start:.1f} s")
            sock.close()
            return
    sock.close()
    check(False, f"silent-peer: a client that never reads was still connected after {args.silent_peer} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--addr", required=True)
    parser.add_argument("--per-client", type=int)
    parser.add_argument("--max-streams", type=int)
    parser.add_argument("--silent-peer", type=float)
    args = parser.parse_args()
    try:
        if args.per_client is not None:
            connections(args)
        if args.max_streams is not None:
            streams(args)
        if args.silent_peer is not None:
            silent_peer(args)
    except Failed as e:
        print(f"bounds_client: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
