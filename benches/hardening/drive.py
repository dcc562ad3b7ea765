"""Slow, idle, hoarding and non-reading clients against a server on
127.0.0.1:PORT (process PID, whose memory is read from /proc).

ONLY=pipelining runs the non-reading check alone; ONLY=slowloris-rounds
runs ROUNDS rounds (default 10) of CONNECTIONS slowloris connections
(default 600, spread over SOURCES client addresses, default 3, so that
each stays under the per-client cap) and prints the server's RSS after
each round."""
import multiprocessing
import os
import select
import socket
import sys
import threading
import time

PORT = int(sys.argv[1])
HOARD = int(sys.argv[2])
PID = int(sys.argv[3])
# ONLY=pipelining runs that check alone.
ONLY = os.environ.get("ONLY")


def connect(source="127.0.0.1"):
    return socket.create_connection(("127.0.0.1", PORT), source_address=(source, 0))


def closed_after(sock, limit=120):
    """Seconds until the server closes `sock` (None if not within `limit`)."""
    sock.settimeout(limit)
    start = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except socket.timeout:
        return None
    except OSError:
        pass
    return time.monotonic() - start


def slowloris():
    s = connect()
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
    stop = threading.Event()

    def dribble():
        i = 0
        while not stop.wait(2):
            try:
                s.sendall(f"X-{i}: y\r\n".encode())
            except OSError:
                return
            i += 1

    threading.Thread(target=dribble, daemon=True).start()
    took = closed_after(s)
    stop.set()
    return took


def stalled_line():
    s = connect()
    s.sendall(b"GET / HT")
    return closed_after(s)


def silent():
    return closed_after(connect())


def idle_keep_alive():
    s = connect()
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    s.settimeout(5)
    got = b""
    while b"Hello, world!" not in got:
        got += s.recv(4096)
    return closed_after(s)


def rss_mib():
    """The server's resident memory (VmRSS), in MiB."""
    with open(f"/proc/{PID}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_ticks():
    """The server's CPU time so far (user + system), in clock ticks."""
    with open(f"/proc/{PID}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def pipelining(n=20):
    """n connections from 127.0.0.4, 4 KB socket buffers each, that
    pipeline requests as fast as the server takes them and never read.
    Returns the seconds from each one's last request taken to its close,
    the seconds from the server's last CPU tick before the closes (when it
    had answered all it took: its last write progress, near enough) to
    the closes, and the server's RSS before, at its peak and after."""
    before = rss_mib()
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        # A small send buffer too: otherwise the client's own kernel takes
        # megabytes of requests after the server has stopped reading, and
        # "the last request taken" would be the client's, seconds late.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        s.bind(("127.0.0.4", 0))
        s.connect(("127.0.0.1", PORT))
        s.setblocking(False)
        socks.append(s)
    batch = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 100
    last = [time.monotonic()] * n
    closed = [None] * n
    sent = [0] * n  # how much of the current batch went out
    peak = before
    ticks, busy = cpu_ticks(), time.monotonic()
    # Write until no socket has taken a byte for 2 s (the server has
    # stopped reading them all), then wait for the closes.
    while time.monotonic() - max(last) < 2:
        for i, s in enumerate(socks):
            try:
                # The rest of a batch first: the requests must stay whole.
                k = s.send(batch[sent[i]:])
                if k:
                    sent[i] = (sent[i] + k) % len(batch)
                    last[i] = time.monotonic()
            except BlockingIOError:
                pass
            except OSError:
                closed[i] = closed[i] or time.monotonic()
        peak = max(peak, rss_mib())
        time.sleep(0.01)
    poller = select.poll()
    for s in socks:
        # A reset (unread requests at the close) or a FIN.
        poller.register(s, select.POLLERR | select.POLLHUP | select.POLLRDHUP)
    fds = {s.fileno(): i for i, s in enumerate(socks)}
    deadline = time.monotonic() + 300
    while None in closed and time.monotonic() < deadline:
        now_ticks = cpu_ticks()
        if now_ticks != ticks and not any(closed):
            ticks, busy = now_ticks, time.monotonic()
        for fd, _ in poller.poll(100):
            i = fds[fd]
            if closed[i] is None:
                closed[i] = time.monotonic()
            poller.unregister(fd)
        peak = max(peak, rss_mib())
    time.sleep(1)
    after = rss_mib()
    for s in socks:
        s.close()
    took = [c - l for c, l in zip(closed, last) if c is not None]
    since_idle = [c - busy for c in closed if c is not None]
    return took, since_idle, n - len(took), before, peak, after


def still_open(sock):
    """Whether the server still holds `sock` open (no EOF waiting)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def hoarder(n, ready, done, kept):
    """Holds n connections from 127.0.0.2 until told to stop; reports how
    many the server kept open."""
    held = []
    for _ in range(n):
        try:
            held.append(connect("127.0.0.2"))
        except OSError:
            break
    ready.set()
    done.wait()
    kept.put(sum(still_open(s) for s in held))


def ask_meanwhile(stop, waits):
    """A request from 127.0.0.3 every 200 ms; appends each answer's wait."""
    while not stop.wait(0.2):
        t = time.monotonic()
        try:
            c = connect("127.0.0.3")
            c.settimeout(5)
            c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            # 200 or 429 (the quick start allows 10 a minute): answered.
            ok = c.recv(64).startswith(b"HTTP/1.1 ")
            c.close()
        except OSError:
            ok = False
        waits.append(time.monotonic() - t if ok else None)


def hoard():
    stop, waits = threading.Event(), []
    asker = threading.Thread(target=ask_meanwhile, args=(stop, waits))
    asker.start()
    procs, readies, done, kept = [], [], multiprocessing.Event(), multiprocessing.Queue()
    per = -(-HOARD // 3)
    start = time.monotonic()
    for i in range(3):
        ready = multiprocessing.Event()
        n = min(per, HOARD - i * per)
        p = multiprocessing.Process(target=hoarder, args=(n, ready, done, kept))
        p.start()
        procs.append(p)
        readies.append(ready)
    for r in readies:
        r.wait()
    opened = time.monotonic() - start
    t = time.monotonic()
    c = connect("127.0.0.3")
    c.settimeout(5)
    c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    reply = c.recv(64)
    answered = time.monotonic() - t
    time.sleep(0.5)  # refusals closed at accept have reached the clients
    done.set()
    stop.set()
    asker.join()
    held = sum(kept.get() for _ in procs)
    for p in procs:
        p.join()
    return opened, reply.split(b"\r\n")[0].decode(), answered, waits, held


def report_pipelining(took, since_idle, open_, before, peak, after):
    print(f"20 connections from 127.0.0.4 pipelining, never reading (4 KB socket buffers): "
          f"closed {min(took, default=0):.2f} to {max(took, default=0):.2f} s after their last "
          f"request was taken, {min(since_idle, default=0):.2f} to "
          f"{max(since_idle, default=0):.2f} s after the server's last CPU tick (it had "
          f"answered all it took), {open_} still open after 300 s; server RSS {before:.1f} MiB "
          f"before, {peak:.1f} MiB at the peak, {after:.1f} MiB after")


def slowloris_round(n, sources, patience=60):
    """n connections from 127.0.1.1 to 127.0.1.<sources>, each sending a
    request line and then a header line every 2 s, never ending its
    headers, until the server closes it (at most `patience` s; the rest
    are closed here). Returns how many the server closed, the seconds from
    the last one opened to the last close, and the server's peak RSS."""
    socks, fds = [], {}
    poller = select.poll()
    peak = rss_mib()
    for i in range(n):
        s = connect(f"127.0.1.{1 + i % sources}")
        try:
            s.sendall(b"GET /admin/rules HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            pass  # refused at accept: its close is seen below
        s.setblocking(False)
        socks.append(s)
        fds[s.fileno()] = i
        poller.register(s, select.POLLIN | select.POLLERR | select.POLLHUP | select.POLLRDHUP)
    start = time.monotonic()
    open_ = set(range(n))
    last_close = start
    line, next_line = 0, start + 2
    while open_ and time.monotonic() - start < patience:
        for fd, _ in poller.poll(200):
            i = fds[fd]
            try:
                data = socks[i].recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data and i in open_:
                open_.discard(i)
                poller.unregister(fd)
                last_close = time.monotonic()
        if time.monotonic() >= next_line:
            for i in list(open_):
                try:
                    socks[i].send(f"X-{line}: y\r\n".encode())
                except OSError:
                    pass  # closed: the poll reports it
            line, next_line = line + 1, next_line + 2
        peak = max(peak, rss_mib())
    for s in socks:
        s.close()
    return n - len(open_), last_close - start, peak


def slowloris_rounds():
    rounds = int(os.environ.get("ROUNDS", "10"))
    n = int(os.environ.get("CONNECTIONS", "600"))
    sources = int(os.environ.get("SOURCES", "3"))
    rss = [rss_mib()]
    print(f"before: RSS {rss[0]:.1f} MiB")
    for r in range(1, rounds + 1):
        closed, took, peak = slowloris_round(n, sources)
        time.sleep(1)
        rss.append(rss_mib())
        print(f"round {r}: {n} slowloris connections from {sources} addresses, {closed} closed "
              f"by the server within {took:.1f} s; RSS peak {peak:.1f} MiB, "
              f"after {rss[-1]:.1f} MiB", flush=True)
    print(f"RSS after round {rounds} / after round 1: {rss[-1] / rss[1]:.3f} "
          f"({rss[-1]:.1f} / {rss[1]:.1f} MiB; goal at most 1.2)")


if ONLY == "slowloris-rounds":
    slowloris_rounds()
    sys.exit(0)

if ONLY == "pipelining":
    report_pipelining(*pipelining())
    sys.exit(0)

results = {}
threads = [threading.Thread(target=lambda n=n, f=f: results.__setitem__(n, f()))
           for n, f in [("slowloris (a header line every 2 s)", slowloris),
                        ("stalled request line", stalled_line),
                        ("connection that sends nothing", silent),
                        ("idle keep-alive connection, after its response", idle_keep_alive)]]
for t in threads:
    t.start()
for t in threads:
    t.join()
for name, took in results.items():
    print(f"{name}: closed after {took:.2f} s" if took is not None else f"{name}: still open after 120 s")
report_pipelining(*pipelining())
opened, status, answered, waits, held = hoard()
served = sorted(w for w in waits if w is not None)
p50 = served[len(served) // 2] if served else 0
p99 = served[min(len(served) - 1, len(served) * 99 // 100)] if served else 0
print(f"{HOARD} connections from 127.0.0.2 opened in {opened:.1f} s, {held} kept open by "
      f"the server; then 127.0.0.3: "
      f"{status!r} in {answered * 1000:.0f} ms; while they opened, 127.0.0.3 asked "
      f"{len(waits)} times: {len(served)} answered, p50 {p50 * 1000:.1f} ms, "
      f"p99 {p99 * 1000:.0f} ms, slowest {max(served, default=0) * 1000:.0f} ms, "
      f"{sum(w >= 1 for w in served)} took 1 s or more")
