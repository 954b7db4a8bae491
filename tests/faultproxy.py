"""A small fault-injecting HTTP/1.1 proxy for the remote-store tests.

It sits between mcfs and a real server (nginx, Swift) on loopback and passes
requests through unchanged (the Host header too, so SigV4 signatures stay
valid), keeping each client connection alive with its own upstream
connection. Faults are armed by the test and hit the next requests:

    p = FaultProxy(upstream_port).start()
    p.fail_503 = 3     # answer the next 3 requests with 503 (not forwarded)
    p.drop = 2         # forward the next 2, then cut the connection mid-body (RST)
    p.stall = 1        # the next answer with a body: headers and part of the body,
                       # then nothing more on that connection (it stays open) until
                       # the client gives up on it or the proxy stops
    p.gate.clear()     # hold every request that arrives from now on ...
    p.gate.set()       # ... until this (stop() sets it too)
    p.counts           # {"requests": n, "503": n, "dropped": n, "stalled": n, "held": n}
    p.held_lines       # the request lines of the requests held, as they arrived
    p.request_lines    # the first 1000 request lines, as received
    p.stop()

Responses with a chunked body switch that connection to a plain byte pipe
(faults then apply to new connections only); GETs of objects have a
Content-Length, so they are always framed.
"""
import select
import socket
import struct
import threading


def _read_head(sock, buf):
    """Reads until the end of an HTTP header block. Returns (head, rest) or (None, b"")."""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None, b""
        buf += data
    i = buf.index(b"\r\n\r\n") + 4
    return buf[:i], buf[i:]


def _header(head, name):
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name:
            return v.strip()
    return None


def _rst(sock):
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class FaultProxy:
    def __init__(self, upstream_port, upstream_host="127.0.0.1"):
        self.up = (upstream_host, upstream_port)
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(128)
        self.port = self.lsock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.request_lines = []
        self.lock = threading.Lock()
        self.fail_503 = 0
        self.drop = 0
        self.stall = 0
        self.counts = {"requests": 0, "503": 0, "dropped": 0, "stalled": 0, "held": 0}
        self.gate = threading.Event()
        self.gate.set()
        self.held_lines = []
        self.stopping = False
        self.thread = None
        self.conns = set()

    def start(self):
        self.thread = threading.Thread(target=self._accept, name="faultproxy", daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.stopping = True
        self.gate.set()
        try:
            self.lsock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.lsock.close()
        for s in list(self.conns):
            try:
                s.close()
            except OSError:
                pass
        if self.thread:
            self.thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            self.conns.add(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _take(self, what):
        with self.lock:
            n = getattr(self, what)
            if n > 0:
                setattr(self, what, n - 1)
                return True
            return False

    def _serve(self, c):
        up = None
        buf = b""
        try:
            while True:
                head, buf = _read_head(c, buf)
                if head is None:
                    return
                with self.lock:
                    self.counts["requests"] += 1
                    if len(self.request_lines) < 1000:
                        self.request_lines.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
                if not self.gate.is_set():
                    with self.lock:
                        self.counts["held"] += 1
                        self.held_lines.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
                    self.gate.wait()
                if self._take("fail_503"):
                    with self.lock:
                        self.counts["503"] += 1
                    c.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                              b"Connection: close\r\n\r\n")
                    return
                if up is None:
                    up = socket.create_connection(self.up)
                    self.conns.add(up)
                up.sendall(head)
                # GET and HEAD only: no request body
                rhead, rest = _read_head(up, b"")
                if rhead is None:
                    return
                method = head.split(b" ", 1)[0]
                status = int(rhead.split(b" ")[1])
                clen = _header(rhead, b"content-length")
                chunked = (_header(rhead, b"transfer-encoding") or b"").lower() == b"chunked"
                if method == b"HEAD" or status in (204, 304) or (clen is None and not chunked):
                    body_len = 0
                elif chunked:
                    c.sendall(rhead + rest)
                    self._pipe(c, up)
                    return
                else:
                    body_len = int(clen)
                if body_len > 0 and self._take("stall"):
                    with self.lock:
                        self.counts["stalled"] += 1
                    c.sendall(rhead)
                    self._forward(c, up, rest, min(body_len // 2, 65536))
                    self._hang(c)
                    return
                if self._take("drop"):
                    with self.lock:
                        self.counts["dropped"] += 1
                    c.sendall(rhead)
                    cut = min(body_len // 2, 65536)
                    sent = rest[:cut]
                    c.sendall(sent)
                    while len(sent) < cut:
                        d = up.recv(min(65536, cut - len(sent)))
                        if not d:
                            break
                        c.sendall(d)
                        sent += d
                    _rst(c)
                    return
                c.sendall(rhead)
                left = body_len
                if rest:
                    c.sendall(rest[:left])
                    left -= min(left, len(rest))
                while left > 0:
                    d = up.recv(min(1 << 20, left))
                    if not d:
                        return
                    c.sendall(d)
                    left -= len(d)
        except OSError:
            pass
        finally:
            for s in (c, up):
                if s is not None:
                    self.conns.discard(s)
                    try:
                        s.close()
                    except OSError:
                        pass

    def _forward(self, c, up, rest, n):
        """Sends the first n bytes of the body (rest: what came with the headers)."""
        sent = rest[:n]
        c.sendall(sent)
        while len(sent) < n:
            d = up.recv(min(65536, n - len(sent)))
            if not d:
                break
            c.sendall(d)
            sent += d

    def _hang(self, c):
        """Sends nothing more; waits until the client closes or the proxy stops."""
        while not self.stopping:
            r, _, _ = select.select([c], [], [], 0.2)
            if r:
                try:
                    if not c.recv(65536):
                        return
                except OSError:
                    return

    def _pipe(self, a, b):
        socks = [a, b]
        while True:
            r, _, _ = select.select(socks, [], [], 60)
            if not r:
                return
            for s in r:
                d = s.recv(65536)
                if not d:
                    return
                (b if s is a else a).sendall(d)
