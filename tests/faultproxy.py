"""A small fault-injecting HTTP/1.1 proxy for the remote-store tests.

It sits between mcfs and a real server (nginx, Swift) on loopback and passes
requests through unchanged (the Host header too, so SigV4 signatures stay
valid), keeping each client connection alive with its own upstream
connection. Faults are armed by the test and hit the next requests:

    p = FaultProxy(upstream_port).start()
    p.fail_503 = 3     # answer the next 3 requests with 503 (not forwarded)
    p.drop = 2         # the next 2 answers with a body: forward half of it, then cut the
                       # connection (RST). An answer with no body (HEAD) can't be cut
                       # mid-body: a client has all of it with the headers.
    p.stall = 1        # the next answer with a body: headers and part of the body,
                       # then nothing more on that connection (it stays open) until
                       # the client gives up on it or the proxy stops
    p.gate.clear()     # hold every request that arrives from now on ...
    p.gate.set()       # ... until this (stop() sets it too)
    p.gate_match = r"^GET /m"  # ... only those whose request line matches (None: all)
    p.answer_delay = 2.5  # answers to PUTs of at least p.delay_min body bytes wait this
                          # long before they go back (a service slow to store an object)
    p.rate = 262144       # answer bodies go back at this many bytes a second, in steady
                          # slices (a slow but working service); 0 = at once
    p.rate_match = r"-0 "  # ... only those to requests whose line matches this regular
                           # expression (None: all)
    p.get_delay = (r"-1 ", 3.0)  # answers to GETs whose line matches r"-1 " wait 3 s (a
                                 # request queued behind others)
    p.refuse = [("PUT", r"", 403)]  # requests of that method whose line matches the regular
                                    # expression are answered with that status and an S3
                                    # error document (403 AccessDenied, 404 NoSuchKey), not
                                    # sent on (a read-only bucket; an object not there yet)
    p.serial = (r"^PUT .*\\.lease", lock)  # a request whose line matches is sent on and
                                         # its answer's headers read while holding lock
                                         # (a test's own requests to the server, made
                                         # under lock, never fall between its steps)
    p.answer = fn      # fn(method, path, head) -> None (forward the request) or
                       # (status, [(name, value)...], body): answered here, not forwarded,
                       # then the connection is closed (a lying or misconfigured server)
    p.counts           # {"requests": n, "503": n, "dropped": n, "stalled": n, "held": n,
                       #  "delayed": n, "paced": n, "refused": n, "answered": n}
    p.held_lines       # the request lines of the requests held, as they arrived
    p.request_lines    # the first 1000 request lines, as received
    p.stop()

Responses with a chunked body (listings, S3 error documents) are passed on
chunk by chunk, the framing kept, and the connection goes on; GETs of
objects have a Content-Length. Faults do not touch chunked bodies. A
request body (a PUT's, framed by Content-Length) is read whole and sent on
with the request; "Expect: 100-continue" is answered here and not sent on
(SigV4 does not sign it).
"""
import contextlib
import re
import select
import socket
import struct
import threading
import time


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
        self.answer_delay = 0.0
        self.delay_min = 65536
        self.rate = 0
        self.rate_match = None
        self.get_delay = None
        self.refuse = []
        self.answer = None
        self.serial = None
        self.counts = {"requests": 0, "503": 0, "dropped": 0, "stalled": 0, "held": 0,
                       "delayed": 0, "paced": 0, "refused": 0, "answered": 0}
        self.gate = threading.Event()
        self.gate.set()
        self.gate_match = None
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
                line = head.split(b"\r\n", 1)[0].decode("latin-1")
                if not self.gate.is_set() and (self.gate_match is None or
                                               re.search(self.gate_match, line)):
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
                head, body, buf = self._request_body(c, head, buf)
                if body is None:
                    return
                if self._refused(c, head):
                    continue
                if self.answer and self._answer_here(c, head):
                    return
                if up is None:
                    up = socket.create_connection(self.up)
                    self.conns.add(up)
                method = head.split(b" ", 1)[0]
                line = head.split(b"\r\n", 1)[0].decode("latin-1")
                serial = self.serial
                with (serial[1] if serial and re.search(serial[0], line)
                      else contextlib.nullcontext()):
                    up.sendall(head + body)
                    rhead, rest = _read_head(up, b"")
                if rhead is None:
                    return
                if method == b"PUT" and self.answer_delay > 0 and len(body) >= self.delay_min:
                    with self.lock:
                        self.counts["delayed"] += 1
                    time.sleep(self.answer_delay)
                if method == b"GET" and self.get_delay and re.search(self.get_delay[0], line):
                    with self.lock:
                        self.counts["delayed"] += 1
                    time.sleep(self.get_delay[1])
                status = int(rhead.split(b" ")[1])
                clen = _header(rhead, b"content-length")
                chunked = (_header(rhead, b"transfer-encoding") or b"").lower() == b"chunked"
                if method == b"HEAD" or status in (204, 304) or (clen is None and not chunked):
                    body_len = 0
                elif chunked:
                    c.sendall(rhead)
                    if not self._chunks(c, up, rest):
                        return
                    continue
                else:
                    body_len = int(clen)
                if body_len > 0 and self._take("stall"):
                    with self.lock:
                        self.counts["stalled"] += 1
                    c.sendall(rhead)
                    self._forward(c, up, rest, min(body_len // 2, 65536))
                    self._hang(c)
                    return
                if body_len > 0 and self._take("drop"):
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
                if body_len > 0 and self.rate > 0 and (self.rate_match is None or
                                                       re.search(self.rate_match, line)):
                    with self.lock:
                        self.counts["paced"] += 1
                    if not self._paced(c, up, rest, body_len):
                        return
                    continue
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

    def _refused(self, c, head):
        """Answers the request itself if a rule of self.refuse matches it; True if so."""
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method = line.split(" ", 1)[0]
        for m, pattern, status in self.refuse:
            if m == method and re.search(pattern, line):
                break
        else:
            return False
        code, reason = {403: ("AccessDenied", "Forbidden"),
                        404: ("NoSuchKey", "Not Found")}[status]
        doc = ("<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>%s</Code>"
               "<Message>refused by the test's proxy</Message></Error>" % code).encode()
        if method == "HEAD":
            doc = b""
        with self.lock:
            self.counts["refused"] += 1
        c.sendall(b"HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\n"
                  b"Content-Length: %d\r\n\r\n" % (status, reason.encode(), len(doc)) + doc)
        return True

    def _answer_here(self, c, head):
        """Sends self.answer's response to this request, if it has one. True if it did."""
        method, path = head.split(b" ", 2)[:2]
        got = self.answer(method.decode("latin-1"), path.decode("latin-1"), head)
        if got is None:
            return False
        status, headers, body = got
        lines = ["HTTP/1.1 %d Answered\r\n" % status]
        lines += ["%s: %s\r\n" % (k, v) for k, v in headers]
        lines.append("Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
        with self.lock:
            self.counts["answered"] += 1
        c.sendall("".join(lines).encode("latin-1") + (b"" if method == b"HEAD" else body))
        return True

    def _chunks(self, c, up, buf):
        """Passes on a chunked body to its last chunk and trailers (buf: what came
        with the headers). Returns False if the server went away."""
        def line():
            nonlocal buf
            while b"\r\n" not in buf:
                d = up.recv(65536)
                if not d:
                    return None
                buf += d
            ln, _, buf = buf.partition(b"\r\n")
            c.sendall(ln + b"\r\n")
            return ln

        while True:
            ln = line()
            if ln is None:
                return False
            size = int(ln.split(b";")[0], 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    ln = line()
                    if ln is None:
                        return False
                    if ln == b"":
                        return True
            while len(buf) < size + 2:  # the chunk and its CRLF
                d = up.recv(65536)
                if not d:
                    return False
                buf += d
            c.sendall(buf[:size + 2])
            buf = buf[size + 2:]

    def _request_body(self, c, head, buf):
        """The request's body (Content-Length bytes), answering "Expect: 100-continue"
        here. Returns (head to send on, body, what the client sent after it), or
        body None if the client went away."""
        clen = int(_header(head, b"content-length") or 0)
        if clen == 0:
            return head, b"", buf
        if (_header(head, b"expect") or b"").lower() == b"100-continue":
            c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            lines = [ln for ln in head.split(b"\r\n") if not ln.lower().startswith(b"expect:")]
            head = b"\r\n".join(lines)
        while len(buf) < clen:
            d = c.recv(1 << 20)
            if not d:
                return head, None, b""
            buf += d
        return head, buf[:clen], buf[clen:]

    def _paced(self, c, up, rest, n):
        """Sends an answer body of n bytes at self.rate bytes a second, in slices a
        tenth of a second apart. Returns False if either side went away."""
        piece = max(1, self.rate // 10)
        pending, left = rest[:n], n - min(n, len(rest))
        while pending or left > 0:
            while len(pending) < piece and left > 0:
                d = up.recv(min(1 << 20, left))
                if not d:
                    return False
                pending += d
                left -= len(d)
            c.sendall(pending[:piece])
            pending = pending[piece:]
            if pending or left > 0:
                time.sleep(0.1)
        return True

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
