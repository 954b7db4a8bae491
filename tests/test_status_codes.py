"""Every class of HTTP status to a block's ranged GET, for the http and the s3
store, read through a real FUSE mount (issue 22, item 1), and the service's
own words in the message of a failed mount (item 9).

A read of a whole file gives either exactly the store's bytes or EIO: never
other bytes, never a short read that ends without an error. A block is
complete only with a 206 whose Content-Range is the asked range, or a 200 for
the whole object, carrying exactly the bytes asked for.

The http store follows redirects (at most 5 hops, http and https only); the
s3 store refuses them (a signed request is not sent on to another address),
so a redirect of the s3 store is EIO with a message naming the status and the
Location.

The http server is a small http.server on loopback: HEAD answers 200, a
ranged GET of "<case>.bin" answers as its case says, "/good/<case>.bin" is a
correct server of the same file (the target of the redirects), and a second
server on another port is the "other host". The s3 store is Swift's s3api
behind faultproxy.py, whose answer hook answers a ranged GET of a case's key
itself (the others go on to Swift, signatures checked); the same hook answers
every request with a canned S3 error document for the messages.
"""
import email.utils
import errno
import hashlib
import http.server
import json
import os
import re
import threading
import time

import pytest

import remote_checks as rc
from conftest import mcfs_mount, need_root
from faultproxy import FaultProxy
from servers import SWIFT_KEY, SWIFT_SECRET, Swift, have_swift

MiB = 1 << 20
BIG = 3 * MiB + 1234  # four 1 MiB blocks, the last one short
SMALL = 100000  # one block: its range is the whole object
OPTS = ["block_size=1M", "ram_cache=16M", "retries=1", "connect_timeout=2", "timeout=5",
        "readahead_max=0"]

# case -> (size, what a read gives on the http store, on the s3 store)
CASES = {
    "206": (BIG, "bytes", "bytes"),
    "200-whole": (SMALL, "bytes", "bytes"),
    "200-ignores-range": (BIG, "EIO", "EIO"),
    "203": (BIG, "EIO", "EIO"),
    "204": (BIG, "EIO", "EIO"),
    "206-other-range": (BIG, "EIO", "EIO"),
    "206-no-content-range": (BIG, "EIO", "EIO"),
    "206-short-body": (BIG, "EIO", "EIO"),
    "206-long-body": (BIG, "EIO", "EIO"),
    "301": (BIG, "bytes", "EIO"),
    "302": (BIG, "bytes", "EIO"),
    "303": (BIG, "bytes", "EIO"),
    "307": (BIG, "bytes", "EIO"),
    "308": (BIG, "bytes", "EIO"),
    "301-no-location": (BIG, "EIO", "EIO"),
    "302-no-location": (BIG, "EIO", "EIO"),
    "303-no-location": (BIG, "EIO", "EIO"),
    "307-no-location": (BIG, "EIO", "EIO"),
    "308-no-location": (BIG, "EIO", "EIO"),
    "302-other-host": (BIG, "bytes", "EIO"),
    "302-chain-5": (BIG, "bytes", "EIO"),
    "302-chain-6": (BIG, "EIO", "EIO"),
    "302-loop": (BIG, "EIO", "EIO"),
    "302-ftp": (BIG, "EIO", "EIO"),
    "304": (BIG, "EIO", "EIO"),
    "400": (BIG, "EIO", "EIO"),
    "401": (BIG, "EIO", "EIO"),
    "403": (BIG, "EIO", "EIO"),
    "404": (BIG, "EIO", "EIO"),
    "410": (BIG, "EIO", "EIO"),
    "412": (BIG, "EIO", "EIO"),
    "416": (BIG, "EIO", "EIO"),
    "429": (BIG, "EIO", "EIO"),
    "500": (BIG, "EIO", "EIO"),
    "502": (BIG, "EIO", "EIO"),
    "503": (BIG, "EIO", "EIO"),
}


def data_of(case):
    return rc.data_for("status-" + case, CASES[case][0])


def etag_of(data):
    return '"%s"' % hashlib.md5(data).hexdigest()


def parse_range(value, size):
    m = re.fullmatch(r"bytes=(\d+)-(\d+)", value or "")
    if not m:
        return None
    a, b = int(m.group(1)), min(int(m.group(2)), size - 1)
    return (a, b) if a <= b else None


def good(data, rng):
    """The right answer: 206 with the asked range."""
    a, b = rng
    return 206, [("Content-Range", "bytes %d-%d/%d" % (a, b, len(data))),
                 ("ETag", etag_of(data))], data[a:b + 1]


def answer(case, data, rng, here, other, hops=None):
    """What the server answers a ranged GET (rng: (first, last)) of case's file.
    here: the URL of the good copy on this server ("/good/<case>.bin"); other: on
    the other host; hops: the redirects left of a chain (None: the first GET)."""
    a, b = rng
    etag = [("ETag", etag_of(data))]
    moved = b"<html><body>moved</body></html>\n"
    if hops is not None:
        return good(data, rng) if hops == 0 else (
            302, [("Location", re.sub(r"/good/", "/hop/%d/" % (hops - 1), here))], moved)
    if case == "206":
        return good(data, rng)
    if case.startswith("200-"):
        return 200, etag, data
    if case == "203":
        return 203, etag + [("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))], \
            data[a:b + 1]
    if case in ("204", "304"):
        return int(case), etag, b""
    if case == "206-other-range":
        a2 = a + 4096 if b + 4096 < len(data) else a - 4096
        b2 = a2 + b - a
        return 206, etag + [("Content-Range", "bytes %d-%d/%d" % (a2, b2, len(data)))], \
            data[a2:b2 + 1]
    if case == "206-no-content-range":
        return 206, etag, data[a:b + 1]
    if case == "206-short-body":
        return 206, etag + [("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))], \
            data[a:b + 1 - 1000]
    if case == "206-long-body":
        return 206, etag + [("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))], \
            data[a:b + 1] + b"\0" * 1000
    if case.endswith("-no-location"):
        return int(case[:3]), etag, moved
    if case == "302-other-host":
        return 302, [("Location", other)], moved
    if case.startswith("302-chain-"):
        n = int(case.rsplit("-", 1)[1])
        return 302, [("Location", re.sub(r"/good/", "/hop/%d/" % (n - 1), here))], moved
    if case == "302-loop":
        return 302, [("Location", here.replace("/good/", "/"))], moved
    if case == "302-ftp":
        return 302, [("Location", "ftp://127.0.0.1/%s.bin" % case)], moved
    status = int(case[:3])
    if status in (301, 302, 303, 307, 308):
        return status, [("Location", here)], moved
    return status, [("Content-Type", "text/plain")], \
        ("mcfs-test says %d to %s.bin\n" % (status, case)).encode()


# ---- the http store: a small server ----

class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    other = None  # the URL of the other host

    def handle_error(self, request, client_address):
        pass  # a client that cut an answer it refused (a body longer than asked)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, headers, body, head_only=False):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        if status not in (204, 304):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head_only and status not in (204, 304):
            self.wfile.write(body)

    def route(self):
        """(case, hops, is the good copy) of the path, or None."""
        m = re.fullmatch(r"/(?:(good)/|hop/(\d+)/)?([0-9a-z-]+)\.bin", self.path)
        if not m or m.group(3) not in CASES:
            return None
        return m.group(3), (int(m.group(2)) if m.group(2) else None), bool(m.group(1))

    def do_HEAD(self):
        self.get(head_only=True)

    def do_GET(self):
        self.get(head_only=False)

    def get(self, head_only):
        if self.path == "/":
            names = [{"name": c + ".bin", "type": "file", "size": CASES[c][0],
                      "mtime": "Mon, 01 Jan 2024 00:00:00 GMT"} for c in CASES]
            return self.send(200, [("Content-Type", "application/json")],
                             json.dumps(names).encode(), head_only)
        r = self.route()
        if r is None:
            return self.send(404, [("Content-Type", "text/plain")], b"no such file\n",
                             head_only)
        case, hops, is_good = r
        data = data_of(case)
        if head_only:
            return self.send(200, [("ETag", etag_of(data)),
                                   ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT"),
                                   ("Accept-Ranges", "bytes")], data, True)
        rng = parse_range(self.headers.get("Range"), len(data))
        if rng is None:
            return self.send(200, [("ETag", etag_of(data))], data)
        here = "http://127.0.0.1:%d/good/%s.bin" % (self.server.server_port, case)
        if is_good:
            return self.send(*good(data, rng))
        other = self.server.other + "/good/%s.bin" % case
        self.send(*answer(case, data, rng, here, other, hops))


def start_server():
    s = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=s.serve_forever, name="status-server", daemon=True).start()
    s.url = "http://127.0.0.1:%d" % s.server_port
    return s


@pytest.fixture(scope="module")
def http_mount(tmp_path_factory):
    need_root()
    main, other = start_server(), start_server()
    main.other = other.other = other.url
    try:
        with mcfs_mount(main.url, str(tmp_path_factory.mktemp("http") / "mnt"),
                        opts=OPTS) as m:
            yield m
    finally:
        for s in (main, other):
            s.shutdown()
            s.server_close()


def read_case(m, case, expect):
    """Reads the case's whole file through the mount: its exact bytes, or EIO."""
    data = data_of(case)
    got = None
    try:
        with open(m.p(case + ".bin"), "rb") as f:
            got = f.read()
    except OSError as e:
        assert expect == "EIO", "%s: %s, but the store's bytes were expected" % (case, e)
        assert e.errno == errno.EIO, "%s: %s" % (case, e)
        return
    assert len(got) == len(data), "%s: read %d bytes of %d, no error" % (case, len(got),
                                                                          len(data))
    assert got == data, "%s: exit 0 with other bytes than the store's" % case
    assert expect == "bytes", "%s: the store's bytes, but EIO was expected" % case


@pytest.mark.parametrize("case", list(CASES))
def test_http_status(http_mount, case):
    read_case(http_mount, case, CASES[case][1])


def test_http_messages(http_mount):
    """The log names the status and the Location of a redirect not followed, and
    quotes the body of an error answer."""
    for case in ("302-no-location", "302-chain-6", "503"):
        try:
            with open(http_mount.p(case + ".bin"), "rb") as f:
                f.read()
        except OSError:
            pass
    log = http_mount.log()
    assert re.search(r"302-no-location\.bin bytes \d+-\d+ failed .*HTTP 302 with no Location",
                     log), log
    assert re.search(r"302-chain-6\.bin bytes \d+-\d+ failed .*more than 5 redirects.* "
                     r"the last to http://127\.0\.0\.1:\d+/hop/0/302-chain-6\.bin", log), log
    assert "HTTP 503: mcfs-test says 503 to 503.bin" in log, log


# ---- the s3 store: Swift's s3api behind the answering proxy ----

BUCKET = "status"
PREFIX = "st"


@pytest.fixture(scope="module")
def swift(tmp_path_factory):
    if not have_swift():
        pytest.skip("swift/memcached not installed (deploy/install-deps.sh test installs them)")
    need_root()
    sw = Swift(str(tmp_path_factory.mktemp("swift"))).start()
    try:
        s3 = sw.s3()
        s3.create_bucket(Bucket=BUCKET)
        for case in CASES:
            s3.put_object(Bucket=BUCKET, Key="%s/%s.bin" % (PREFIX, case), Body=data_of(case))
        yield sw
    finally:
        sw.stop()


def s3_env():
    return {"AWS_ACCESS_KEY_ID": SWIFT_KEY, "AWS_SECRET_ACCESS_KEY": SWIFT_SECRET,
            "AWS_REGION": "us-east-1", "AWS_PROFILE": "", "AWS_ENDPOINT_URL": ""}


def s3_answer(px, method, path, head):
    """The proxy's hook: a ranged GET of a case's key answered as the case says;
    None (on to Swift) for the rest and for the cases that are answered right."""
    m = re.fullmatch(r"/%s/%s/([0-9a-z-]+)\.bin" % (BUCKET, PREFIX), path)
    rng_line = re.search(rb"\r\nrange: *([^\r]*)", head, re.I)
    if method != "GET" or not m or m.group(1) not in CASES or not rng_line:
        return None
    case = m.group(1)
    if case == "206":
        return None
    data = data_of(case)
    here = "%s/%s/%s/good/%s.bin" % (px.url, BUCKET, PREFIX, case)
    return answer(case, data, parse_range(rng_line.group(1).decode(), len(data)), here,
                  here.replace("127.0.0.1", "localhost"))


@pytest.fixture(scope="module")
def s3_mount(swift, tmp_path_factory):
    px = FaultProxy(swift.port).start()
    px.answer = lambda method, path, head: s3_answer(px, method, path, head)
    try:
        with mcfs_mount("s3://%s/%s" % (BUCKET, PREFIX),
                        str(tmp_path_factory.mktemp("s3") / "mnt"),
                        opts=OPTS + ["endpoint=" + px.url], env=s3_env()) as m:
            m.proxy = px
            yield m
    finally:
        px.stop()


@pytest.mark.parametrize("case", list(CASES))
def test_s3_status(s3_mount, case):
    read_case(s3_mount, case, CASES[case][2])


def test_s3_redirect_message(s3_mount):
    """A redirect of the s3 store is refused, naming the status and the Location."""
    try:
        with open(s3_mount.p("307.bin"), "rb") as f:
            f.read()
    except OSError:
        pass
    assert re.search(r"s3://status/st/307\.bin bytes \d+-\d+ failed .*HTTP 307 to "
                     r"http://127\.0\.0\.1:\d+/status/st/good/307\.bin: moved; mcfs does not "
                     r"follow an S3 redirect", s3_mount.log()), s3_mount.log()


def s3_error(code, message, status, extra="", headers=()):
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
            '<Message>%s</Message>%s<RequestId>4442587FB7D0A2F9</RequestId></Error>'
            % (code, message, extra)).encode()
    return status, [("Content-Type", "application/xml")] + list(headers), body


# code -> (the answer to every request, what the mount's error output must say)
MOUNT_ERRORS = {
    "AuthorizationHeaderMalformed": (
        s3_error("AuthorizationHeaderMalformed", "The authorization header is malformed; the "
                 "region 'us-east-1' is wrong; expecting 'eu-west-1'", 400,
                 "<Region>eu-west-1</Region>"),
        ["HTTP 400 AuthorizationHeaderMalformed: The authorization header is malformed; the "
         "region 'us-east-1' is wrong; expecting 'eu-west-1'", "set region=eu-west-1"]),
    "RequestTimeTooSkewed": (
        lambda: s3_error("RequestTimeTooSkewed", "The difference between the request time and "
                         "the current time is too large.", 403,
                         "<MaxAllowedSkewMilliseconds>900000</MaxAllowedSkewMilliseconds>",
                         [("Date", email.utils.formatdate(time.time() + 1800, usegmt=True))]),
        ["HTTP 403 RequestTimeTooSkewed: The difference between the request time and the "
         "current time is too large; the node's clock differs from the service's by more than "
         "15 minutes: check NTP (the service's Date is 18", " s ahead of this node's clock)"]),
    "PermanentRedirect": (
        s3_error("PermanentRedirect", "The bucket you are attempting to access must be "
                 "addressed using the specified endpoint. Please send all future requests to "
                 "this endpoint.", 301, "<Bucket>status</Bucket>"
                 "<Endpoint>status.s3.eu-west-1.amazonaws.com</Endpoint>",
                 [("x-amz-bucket-region", "eu-west-1")]),
        ["HTTP 301 PermanentRedirect: The bucket you are attempting to access must be "
         "addressed using the specified endpoint.", "status.s3.eu-west-1.amazonaws.com",
         "the bucket is in region eu-west-1: set region=eu-west-1"]),
    "AccessDenied": (
        s3_error("AccessDenied", "Access Denied by bucket policy", 403),
        ["S3 refused access", "HTTP 403 AccessDenied: Access Denied by bucket policy"]),
    "NoSuchBucket": (
        s3_error("NoSuchBucket", "The specified bucket does not exist", 404,
                 "<BucketName>status</BucketName>"),
        ["HTTP 404 NoSuchBucket: The specified bucket does not exist"]),
    "SlowDown": (
        s3_error("SlowDown", "Please reduce your request rate.", 503),
        ["HTTP 503 SlowDown: Please reduce your request rate."]),
    "InternalError": (
        s3_error("InternalError", "We encountered an internal error. Please try again.", 500),
        ["HTTP 500 InternalError: We encountered an internal error. Please try again."]),
}


@pytest.mark.parametrize("code", list(MOUNT_ERRORS))
def test_s3_error_fails_mount_with_its_words(swift, tmp_path, code):
    canned, words = MOUNT_ERRORS[code]
    with FaultProxy(swift.port) as px:
        px.answer = lambda method, path, head: canned() if callable(canned) else canned
        with pytest.raises(RuntimeError) as ei:
            with mcfs_mount("s3://%s/%s" % (BUCKET, PREFIX), str(tmp_path / "mnt"),
                            opts=OPTS + ["endpoint=" + px.url], env=s3_env()):
                pass
    msg = str(ei.value)
    assert "exited with" in msg, msg
    for w in words:
        assert w in msg, "%r is not in the mount's output:\n%s" % (w, msg)


def test_s3_wrong_region_fails_mount_with_its_words(swift, tmp_path):
    """Swift's own answer to a request signed for another region."""
    with pytest.raises(RuntimeError) as ei:
        with mcfs_mount("s3://%s/%s" % (BUCKET, PREFIX), str(tmp_path / "mnt"),
                        opts=OPTS + ["endpoint=" + swift.endpoint, "region=eu-west-1"],
                        env=s3_env()):
            pass
    msg = str(ei.value)
    assert ("HTTP 400 AuthorizationHeaderMalformed: The authorization header is malformed; the "
            "region 'eu-west-1' is wrong; expecting 'us-east-1'; the bucket is in region "
            "us-east-1: set region=us-east-1") in msg, msg


def test_http_error_body_fails_mount_with_its_words(tmp_path):
    """An http store's error answer at mount: its first words are shown."""
    need_root()

    class Refusing(Handler):
        def get(self, head_only):
            self.send(500, [("Content-Type", "text/html")],
                      b"<html><head><title>500 Internal Server Error</title></head>\n<body>"
                      b"<h1>the origin's disk is gone</h1>\x1b[31m</body></html>\n", head_only)

    s = Server(("127.0.0.1", 0), Refusing)
    threading.Thread(target=s.serve_forever, name="refusing-server", daemon=True).start()
    try:
        with pytest.raises(RuntimeError) as ei:
            with mcfs_mount("http://127.0.0.1:%d" % s.server_port, str(tmp_path / "mnt"),
                            opts=OPTS):
                pass
    finally:
        s.shutdown()
        s.server_close()
    msg = str(ei.value)
    assert "HTTP 500: 500 Internal Server Error the origin's disk is gone" in msg, msg
    assert "\x1b" not in msg, msg
