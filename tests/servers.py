"""Real test servers on loopback: nginx (http store) and OpenStack Swift with
s3api (s3 store, verifies SigV4 signatures).

Each server lives under its own scratch directory, listens on a free port of
127.0.0.1, records the PIDs it started and is stopped by PID (never by name)
in stop(). Nothing here touches /etc: Swift reads its swift.conf from
`swift_dir`, nginx gets -p/-c.

    with Nginx(root_dir) as ng: ng.url            # http://127.0.0.1:PORT
    with Swift(work_dir) as sw: sw.endpoint, sw.s3() (a boto3 client)
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

SWIFT_KEY = "test:tester"
SWIFT_SECRET = "testing"
SWIFT_REGION = "us-east-1"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout, proc=None, host="127.0.0.1"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def have_nginx():
    return shutil.which("nginx") is not None or os.path.exists("/usr/sbin/nginx")


def have_swift():
    return all(shutil.which(b) for b in ("swift-proxy-server", "swift-object-server",
                                           "swift-container-server", "swift-account-server",
                                           "swift-ring-builder", "memcached"))


class Nginx:
    """nginx serving `root` with Range, keep-alive and a JSON autoindex."""

    def __init__(self, root, workdir=None, port=None, autoindex=True, access_log=None, extra="",
                 tls=None, workers=2, host="127.0.0.1"):
        self.root = os.path.abspath(root)
        self.host = host  # the address it listens on (the simulation's bridge, tests/bench)
        self.tls = tls  # (cert.pem, key.pem): serve https
        self.extra = extra  # more directives for the server block (e.g. "etag off;")
        self.access_log = access_log  # a path: log every request there (counted by tests)
        self.dir = workdir or (self.root.rstrip("/") + "-nginx")
        self.port = port or free_port()
        self.autoindex = autoindex  # True or "json": JSON listings; "html": HTML; False: none
        self.url = "%s://%s:%d" % ("https" if tls else "http", host, self.port)
        self.pid = None
        self.workers = workers  # worker processes: a number, or "auto" (one per CPU)

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        conf = os.path.join(self.dir, "nginx.conf")
        ai = "autoindex on; autoindex_format json;" if self.autoindex else ""
        if self.autoindex == "html":  # rclone's http backend parses HTML listings
            ai = "autoindex on;"
        user = "user root;" if os.geteuid() == 0 else ""  # workers read the test's tmp dirs
        with open(conf, "w") as f:
            f.write("""
%(user)s
worker_processes %(w)s;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log warn;
daemon on;
events { worker_connections 1024; }
http {
    access_log %(log)s;
    sendfile on; tcp_nopush on;
    keepalive_requests 100000; keepalive_timeout 60;
    client_body_temp_path %(d)s/body; proxy_temp_path %(d)s/proxy;
    fastcgi_temp_path %(d)s/fastcgi; uwsgi_temp_path %(d)s/uwsgi; scgi_temp_path %(d)s/scgi;
    types { application/json json; }
    default_type application/octet-stream;
    server {
        listen %(h)s:%(p)d%(ssl)s;
        root %(r)s;
        %(ai)s
        %(extra)s
    }
}
""" % {"d": self.dir, "p": self.port, "h": self.host, "w": self.workers, "r": self.root, "ai": ai, "user": user, "extra": self.extra,
       "ssl": (" ssl; ssl_certificate %s; ssl_certificate_key %s" % self.tls) if self.tls else "",
       "log": self.access_log or "off"})
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        subprocess.run([nginx, "-c", conf, "-p", self.dir + "/"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if not wait_port(self.port, 10, host=self.host):
            raise RuntimeError("nginx did not listen on %s:%d" % (self.host, self.port))
        with open(os.path.join(self.dir, "nginx.pid")) as f:
            self.pid = int(f.read().strip())
        return self

    def stop(self):
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGQUIT)  # the master stops its workers
            except ProcessLookupError:
                pass
            deadline = time.time() + 10
            while time.time() < deadline:
                try:
                    os.kill(self.pid, 0)
                    time.sleep(0.05)
                except ProcessLookupError:
                    break
            else:
                os.kill(self.pid, signal.SIGKILL)
            self.pid = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


_SERVER_CONF = """[DEFAULT]
devices = %(dir)s/node
mount_check = false
disable_fallocate = true
bind_ip = 127.0.0.1
bind_port = %(port)d
workers = %(workers)d
user = root
swift_dir = %(dir)s/etc
log_name = %(name)s
[pipeline:main]
pipeline = %(name)s-server
[app:%(name)s-server]
use = egg:swift#%(name)s
"""

_PROXY_CONF = """[DEFAULT]
bind_ip = %(host)s
bind_port = %(port)d
workers = %(workers)d
user = root
swift_dir = %(dir)s/etc
log_level = WARNING
client_timeout = 120
[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
allow_account_management = true
# One replica on one loopback node: a node the proxy "error-limits" after 10
# slow answers (a sanitizer pass on 2 CPUs) would turn every request for the
# next minute into a 503, so no error limiting, and patient timeouts.
conn_timeout = 5
node_timeout = 60
error_suppression_limit = 1000000
[filter:s3api]
use = egg:swift#s3api
location = us-east-1
[filter:tempauth]
use = egg:swift#tempauth
user_admin_admin = admin .admin .reseller_admin
user_test_tester = testing .admin
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:%(mc)d
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
"""


class Swift:
    """memcached + Swift account/container/object/proxy servers with s3api.

    Ports are picked free at start, so several suites may run at once.
    Credentials: SWIFT_KEY / SWIFT_SECRET, region us-east-1, path style.
    """

    started = []  # every one: the logs of those a failed test saw go with its report

    def __init__(self, workdir, workers=1, host="127.0.0.1"):
        self.dir = os.path.abspath(workdir)
        self.workers = workers
        self.host = host  # the proxy's (S3 front end's) address; the others stay on loopback
        self.procs = {}
        self.port = None
        self.endpoint = None
        self.stopped_at = None

    def _write_conf(self):
        for sub in ("etc", "node/d1", "log", "run"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        etc = os.path.join(self.dir, "etc")
        with open(os.path.join(etc, "swift.conf"), "w") as f:
            f.write("[swift-hash]\nswift_hash_path_suffix = mcfs-test-suffix\n"
                    "swift_hash_path_prefix = mcfs-test-prefix\n"
                    "[storage-policy:0]\nname = Policy-0\ndefault = yes\n")
        for name, port in self.ports.items():
            if name == "proxy":
                text = _PROXY_CONF % {"dir": self.dir, "port": port, "mc": self.mc_port,
                                      "workers": self.workers, "host": self.host}
            else:
                text = _SERVER_CONF % {"dir": self.dir, "port": port, "name": name,
                                       "workers": 1}
            with open(os.path.join(etc, "%s-server.conf" % name), "w") as f:
                f.write(text)
        for name in ("account", "container", "object"):
            b = os.path.join(etc, "%s.builder" % name)
            if os.path.exists(b):
                os.unlink(b)
            run = lambda *a: subprocess.run(["swift-ring-builder", b, *a], check=True,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            run("create", "8", "1", "1")
            run("add", "r1z1-127.0.0.1:%d/d1" % self.ports[name], "1")
            subprocess.run(["swift-ring-builder", b, "rebalance"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)

    def _spawn(self, key, cmd):
        log = open(os.path.join(self.dir, "log", key + ".log"), "ab")
        self.procs[key] = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
        log.close()

    def start(self, timeout=60):
        self.mc_port = free_port()
        self.ports = {n: free_port() for n in ("account", "container", "object", "proxy")}
        self.port = self.ports["proxy"]
        self.endpoint = "http://%s:%d" % (self.host, self.port)
        self._write_conf()
        self._spawn("memcached", ["memcached", "-l", "127.0.0.1", "-p", str(self.mc_port),
                                  "-u", "root", "-m", "64", "-U", "0"])
        for n in ("account", "container", "object", "proxy"):
            self._spawn(n, ["swift-%s-server" % n,
                            os.path.join(self.dir, "etc", "%s-server.conf" % n), "-v"])
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.endpoint + "/healthcheck", timeout=1) as r:
                    if r.read() == b"OK":
                        break
            except OSError:
                pass
            for k, p in self.procs.items():
                if p.poll() is not None:
                    self.stop()
                    raise RuntimeError("swift %s exited: see %s/log/%s.log" % (k, self.dir, k))
            time.sleep(0.1)
        else:
            self.stop()
            raise RuntimeError("swift did not answer /healthcheck in %ds" % timeout)
        for n in ("account", "container", "object"):
            wait_port(self.ports[n], 10)
        self.stopped_at = None
        Swift.started.append(self)
        return self

    def stop_proxy(self):
        """Stops only the proxy (the S3 front end), as if the server went away."""
        self._stop_one("proxy")

    def start_proxy(self):
        self._spawn("proxy", ["swift-proxy-server",
                              os.path.join(self.dir, "etc", "proxy-server.conf"), "-v"])
        if not wait_port(self.port, 30, self.procs["proxy"], host=self.host):
            raise RuntimeError("swift proxy did not come back")

    def _stop_one(self, key):
        p = self.procs.pop(key, None)
        if p is None or p.poll() is not None:
            return
        # the servers fork workers into the new session: signal the group by its id
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        deadline = time.time() + 5
        while time.time() < deadline:  # workers of the group
            try:
                os.killpg(p.pid, 0)
                time.sleep(0.05)
            except ProcessLookupError:
                break

    def stop(self):
        for key in list(self.procs):
            self._stop_one(key)
        self.stopped_at = time.time()

    def log_problems(self, lines=20):
        """The last error, timeout and 5xx lines of each server's log (-v logs to it)."""
        bad = re.compile(r"ERROR|Timeout|Traceback|rror:|\" 5\d\d ")
        out = []
        for name in ("proxy", "object", "container", "account"):
            try:
                with open(os.path.join(self.dir, "log", name + ".log"), errors="replace") as f:
                    hits = [l for l in f if bad.search(l)]
            except OSError:
                continue
            out += ["%s: %s" % (name, l.rstrip()) for l in hits[-lines:]]
        return "\n".join(out)

    def s3(self):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=SWIFT_REGION,
                            aws_access_key_id=SWIFT_KEY, aws_secret_access_key=SWIFT_SECRET,
                            config=Config(s3={"addressing_style": "path"},
                                          retries={"max_attempts": 3}))

    def env(self):
        """Environment for a signed client (mcfs or the aws CLI)."""
        return {"AWS_ACCESS_KEY_ID": SWIFT_KEY, "AWS_SECRET_ACCESS_KEY": SWIFT_SECRET,
                "AWS_DEFAULT_REGION": SWIFT_REGION, "AWS_ENDPOINT_URL": self.endpoint}

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
