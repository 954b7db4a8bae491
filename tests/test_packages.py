"""The Debian package, its man page, and the Python package's editable install (issue 25).

- cpack builds mcfs_VERSION_ARCH.deb from a fresh build tree (prefix /usr): it holds the
  daemon, libmcfs.so.2 and its links, the headers, the unit (naming /usr/bin/mcfs), the man
  page and /etc/mcfs/mcfs.conf as a conffile, and no Python; it depends on the packages of
  the libraries mcfs links (dpkg-shlibdeps) and on fuse3. Built against the private libfuse
  (deploy/build-libfuse.sh), that library is in the package, found through $ORIGIN.
- the man page (docs/mcfs.8.scd, built with scdoc) renders with man(1), and its OPTIONS
  are exactly the keys of config/cfg.c's table: a key added or removed without the page
  fails here.
- as root with dpkg: `dpkg -i` puts mcfs in /usr/bin, where it runs with the packaged
  libfuse and a program builds against the headers and -lmcfs; `dpkg -r` keeps the
  conffile, `dpkg --purge` leaves no path of `dpkg -L` that was not there before, and no
  new file anywhere under the directories it wrote to.
- `pip install -e gpu/python` in a venv keeps the safetensors switch: MCFS_SAFETENSORS=1
  loads mcfs at interpreter start from the source tree.
- the unit under a real systemd: a Debian booted with systemd-nspawn installs the .deb and
  starts mcfs.service; the mount serves the store's bytes, `systemd-analyze security` is at most
  5.0, a reader survives a kill -9 of the daemon (systemd's descriptor store) and a stop with a
  file open ends inactive.
- deploy/build-libfuse.sh pins libfuse by version and SHA-256: a tarball of another hash is
  refused, and the private libfuse mcfs runs with is that version.
"""
import glob
import gzip
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import MCFS, ROOT

PKG = os.path.join(ROOT, "gpu", "python")
HEADERS = ("mcfs_ioctl.h", "mcfs_client.h", "safetensors.h")


def run(cmd, **kw):
    kw.setdefault("timeout", 600)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def cfg_keys():
    """The option names of config/cfg.c's key table."""
    with open(os.path.join(ROOT, "config", "cfg.c")) as f:
        src = f.read()
    table = src[src.index("static const struct key keys[] = {"):]
    table = table[:table.index("\n};")]
    keys = re.findall(r'^\s*\{"([a-z0-9_]+)", KEY_', table, re.M)
    assert len(keys) > 40, keys
    return keys


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A build tree configured for /usr, and the .deb cpack made from it."""
    if os.path.realpath(MCFS) != os.path.realpath(os.path.join(ROOT, "build", "fs", "mcfs")):
        # tests/run.sh's later passes (system libfuse, sanitizers) are the daemon's
        pytest.skip("the package is built from the source tree in the main pass (MCFS_BIN "
                    "names another build: %s)" % MCFS)
    for tool in ("cpack", "dpkg-deb", "dpkg-shlibdeps"):
        if not shutil.which(tool):
            pytest.skip("%s is not installed (deploy/install-deps.sh build: cmake, dpkg-dev)"
                        % tool)
    assert shutil.which("scdoc"), "scdoc is missing: deploy/install-deps.sh build installs it"
    b = str(tmp_path_factory.mktemp("pkgbuild"))
    r = run(["cmake", "-S", ROOT, "-B", b, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
             "-DCMAKE_INSTALL_PREFIX=/usr"])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(["cmake", "--build", b, "-j%d" % (os.cpu_count() or 2)])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr
    r = run(["cpack", "--config", os.path.join(b, "CPackConfig.cmake"), "-B",
             os.path.join(b, "package")])
    assert r.returncode == 0, r.stdout + r.stderr
    (deb,) = glob.glob(os.path.join(b, "package", "mcfs_*.deb"))
    return b, deb


def private_libfuse(build):
    """The private libfuse's lib/ that the build links (its rpath), or None."""
    out = run(["readelf", "-d", os.path.join(build, "fs", "mcfs")]).stdout
    for path in re.findall(r"(?:RUNPATH|RPATH).*\[(.*)\]", out):
        for d in path.split(":"):
            if glob.glob(os.path.join(d, "libfuse3.so.*")):
                return d
    return None


def test_deb_contents_and_dependencies(built):
    b, deb = built
    with open(os.path.join(ROOT, "common", "mcfs.h")) as f:
        version = re.search(r'#define MCFS_VERSION "([^"]+)"', f.read()).group(1)
    arch = run(["dpkg", "--print-architecture"]).stdout.strip()
    assert os.path.basename(deb) == "mcfs_%s_%s.deb" % (version, arch), deb
    listing = run(["dpkg-deb", "-c", deb]).stdout
    paths = {ln.split()[5].lstrip(".") for ln in listing.splitlines()}
    multiarch = run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"]).stdout.strip()
    want = {"/usr/bin/mcfs", "/usr/lib/systemd/system/mcfs.service",
            "/usr/share/man/man8/mcfs.8.gz", "/etc/mcfs/mcfs.conf",
            "/usr/lib/%s/libmcfs.so.2" % multiarch, "/usr/lib/%s/libmcfs.so.2.0.0" % multiarch}
    want |= {"/usr/include/mcfs/" + h for h in HEADERS}
    assert want <= paths, sorted(want - paths)
    assert "libmcfs.so.2 -> libmcfs.so.2.0.0" in listing, listing
    # the Python package is pip's alone
    assert not [p for p in paths if "python" in p or p.endswith(".py")], sorted(paths)

    fields = run(["dpkg-deb", "-f", deb, "Depends"]).stdout
    deps = {d.split()[0] for d in fields.replace(",", " , ").split(" , ") if d.strip()}
    for d in ("fuse3", "libcurl4", "liburing2", "liblmdb0", "libinih1", "libxxhash0",
              "libcjson1", "libexpat1", "libssl3", "libmicrohttpd12"):
        assert d in deps, (d, fields)
    ctl = run(["dpkg-deb", "-I", deb, "conffiles"]).stdout.split()
    assert ctl == ["/etc/mcfs/mcfs.conf"], ctl

    x = os.path.join(b, "x")
    assert run(["dpkg-deb", "-x", deb, x]).returncode == 0
    with open(os.path.join(x, "usr/lib/systemd/system/mcfs.service")) as f:
        unit = f.read()
    assert "ExecStart=/usr/bin/mcfs mount " in unit and "/usr/local" not in unit, unit
    rpath = re.findall(r"RUNPATH.*\[(.*)\]", run(["readelf", "-d", x + "/usr/bin/mcfs"]).stdout)
    lib = private_libfuse(b)
    if lib:
        # the private libfuse travels in the package, found beside the binary
        assert rpath == ["$ORIGIN/../lib/mcfs"], rpath
        libs = sorted(os.path.basename(p) for p in glob.glob(x + "/usr/lib/mcfs/libfuse3.so.*"))
        assert libs == sorted(os.path.basename(p) for p in
                              glob.glob(os.path.join(lib, "libfuse3.so.*"))), libs
        assert "libfuse3-3" not in deps and "libnuma1" in deps, fields
    else:
        assert "libfuse3-3" in deps and not rpath, (fields, rpath)


def test_man_page_documents_every_option(built):
    b, _ = built
    page = os.path.join(b, "docs", "mcfs.8")
    with gzip.open(page + ".gz", "rt") as f, open(page) as g:
        assert f.read() == g.read()
    r = run(["man", "-l", page], env=dict(os.environ, MANWIDTH="120", MANPAGER="cat",
                                               PAGER="cat", MAN_KEEP_FORMATTING="0"))
    assert r.returncode == 0 and r.stdout, r.stderr
    text = re.sub(r".\x08", "", r.stdout)  # overstrike from a groff without -c
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "OPTIONS", "SIGNALS",
                    "FILES"):
        assert re.search(r"^%s$" % section, text, re.M), section
    opts = text[text.index("\nOPTIONS\n"):text.index("\nSIGNALS\n")]
    # one item per option: its name alone on a line, its text indented below
    documented = re.findall(r"^ {7}([a-z0-9_]+)$", opts, re.M)
    keys = cfg_keys()
    assert sorted(documented) == sorted(keys), (
        "docs/mcfs.8.scd OPTIONS is stale: missing %s, not options %s" %
        (sorted(set(keys) - set(documented)), sorted(set(documented) - set(keys))))
    for cmd in ("mount", "umount", "prefetch", "status", "evict", "refresh", "log-level",
                "manifest", "help-config"):
        assert re.search(r"^ {7}%s\b" % re.escape(cmd), text, re.M), cmd


def snapshot(roots):
    """Every path under `roots` (not following links)."""
    seen = set()
    for r in roots:
        for d, dirs, files in os.walk(r):
            seen.add(d)
            seen.update(os.path.join(d, n) for n in dirs + files)
    return seen


# what dpkg and its triggers change on their own: its database, man-db's index
VOLATILE = ("/var/lib/dpkg/", "/var/cache/man/", "/var/cache/debconf/", "/var/cache/mcfs")
ROOTS = ("/usr", "/etc", "/opt/mcfs", "/var/lib/dpkg/info", "/var/cache")


def dpkg(*args):
    r = run(["dpkg", *args], env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    assert r.returncode == 0, (args, r.stdout + r.stderr)
    return r


def test_install_run_and_purge(built, tmp_path):
    _, deb = built
    if os.geteuid() != 0:
        pytest.skip("installs the .deb into this system: needs root (CI's VM)")
    if not shutil.which("dpkg"):
        pytest.skip("dpkg is missing: not a Debian system")
    if run(["dpkg-query", "-W", "-f=${Status}", "mcfs"]).stdout.endswith(" installed"):
        pytest.skip("the mcfs package is installed here (deploy/quickstart.sh): not replacing "
                    "and purging the admin's install")
    before = snapshot(ROOTS)
    try:
        dpkg("-i", deb)
        listed = run(["dpkg", "-L", "mcfs"]).stdout.split()
        assert "/usr/bin/mcfs" in listed, listed
        # a minimal image may tell dpkg to skip man pages (path-exclude)
        excluded = any("/usr/share/man" in ln and ln.startswith("path-exclude")
                       for cf in glob.glob("/etc/dpkg/dpkg.cfg.d/*") for ln in open(cf))
        if not excluded:
            assert "/usr/share/man/man8/mcfs.8.gz" in listed, listed
        v = run(["/usr/bin/mcfs", "--version"])
        assert v.returncode == 0 and v.stdout.startswith("mcfs "), v.stdout + v.stderr
        assert re.search(r"^libfuse \d+\.\d+", v.stdout, re.M), v.stdout
        ldd = run(["ldd", "/usr/bin/mcfs"]).stdout
        m = re.search(r"libfuse3\.so\.\d+ => (\S+)", ldd)
        assert m, ldd
        if os.path.exists("/usr/lib/mcfs"):
            # the packaged copy, not /opt/mcfs/libfuse nor the system's 3.14
            assert os.path.realpath(m.group(1)).startswith("/usr/lib/mcfs/"), ldd
        if not excluded and shutil.which("man"):
            assert run(["man", "-w", "mcfs"]).stdout.strip() == "/usr/share/man/man8/mcfs.8.gz"
        # a program builds against the installed headers and library, and runs
        if shutil.which("cc"):
            prog = tmp_path / "p.c"
            prog.write_text('#include <mcfs/mcfs_client.h>\n#include <stdio.h>\n'
                            'int main(void) { char e[128]; '
                            'long long n = mcfs_load_file("/nonexistent", NULL, 0, e, sizeof e);'
                            ' printf("%lld\\n", n); return n < 0 ? 0 : 1; }\n')
            r = run(["cc", "-o", str(tmp_path / "p"), str(prog), "-lmcfs"])
            assert r.returncode == 0, r.stderr
            r = run([str(tmp_path / "p")])
            assert r.returncode == 0, r.stdout + r.stderr
        dpkg("-r", "mcfs")
        assert not os.path.exists("/usr/bin/mcfs")
        assert os.path.exists("/etc/mcfs/mcfs.conf")  # a conffile: kept until purge
        dpkg("--purge", "mcfs")
    finally:
        if run(["dpkg-query", "-W", "mcfs"]).returncode == 0:
            run(["dpkg", "--purge", "mcfs"])
    left = [p for p in listed if p not in before and os.path.lexists(p)]
    assert not left, left
    after = snapshot(ROOTS)
    new = sorted(p for p in after - before if not p.startswith(VOLATILE))
    assert not new, new


def test_pip_editable_keeps_the_switch(tmp_path):
    """pip install -e: the editable wheel carries mcfs_switch.pth (gpu/python/setup.py)."""
    env_dir = tmp_path / "venv"
    r = run([sys.executable, "-m", "venv", str(env_dir)])
    if r.returncode != 0:
        pytest.skip("no venv module (Debian: python3-venv): %s" % r.stderr.strip())
    py = str(env_dir / "bin" / "python")
    src = tmp_path / "src"
    shutil.copytree(PKG, str(src), ignore=shutil.ignore_patterns("__pycache__", "build",
                                                                  "*.egg-info"))
    # pip's build isolation fetches setuptools and wheel (PyPI or a find-links);
    # without network, the build dependencies of this Python, if it has them
    r = run([py, "-m", "pip", "install", "-q", "-e", str(src)])
    if r.returncode != 0:
        first = r.stdout + r.stderr
        r = run([py, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index", "-e",
                 str(src)])
        if r.returncode != 0:
            pytest.skip("pip could not build the editable install (no network for setuptools "
                        "and wheel?): %s / %s" % (first.strip()[-300:], r.stderr.strip()[-300:]))
    code = "import sys; m = sys.modules.get('mcfs'); print(m is not None, m and m.__file__)"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MCFS_SAFETENSORS")}
    on = run([py, "-c", code], env=dict(env, MCFS_SAFETENSORS="1"), cwd="/")
    assert on.returncode == 0, on.stderr
    assert on.stdout.split() == ["True", str(src / "mcfs" / "__init__.py")], on.stdout
    off = run([py, "-c", code], env=env, cwd="/")
    assert off.stdout.split() == ["False", "None"], off.stdout
    # and pip removes all of it
    r = run([py, "-m", "pip", "uninstall", "-y", "-q", "mcfs"])
    assert r.returncode == 0, r.stderr
    site = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout
    left = [n for n in os.listdir(site.strip()) if "mcfs" in n]
    assert not left, left


def libfuse_pin():
    with open(os.path.join(ROOT, "deploy", "build-libfuse.sh")) as f:
        src = f.read()
    version = re.search(r"^version=(\d+\.\d+\.\d+)$", src, re.M)
    sha = re.search(r"^sha256=([0-9a-f]{64})$", src, re.M)
    assert version and sha, "build-libfuse.sh pins no version and sha256"
    return version.group(1), sha.group(1)


def test_libfuse_pinned_by_version_and_hash(tmp_path):
    """build-libfuse.sh builds one libfuse: a tarball of another hash is refused, and the
    private libfuse mcfs runs with (if any) is that version."""
    version, sha = libfuse_pin()
    fake = tmp_path / ("fuse-%s.tar.gz" % version)
    fake.write_bytes(b"not libfuse")
    prefix = tmp_path / "prefix"
    r = run(["bash", os.path.join(ROOT, "deploy", "build-libfuse.sh")],
            env=dict(os.environ, MCFS_LIBFUSE_BUILD="yes", MCFS_LIBFUSE_PREFIX=str(prefix),
                     MCFS_LIBFUSE_TARBALL=str(fake), MCFS_LIBFUSE_URLS="http://127.0.0.1:9/"),
            timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert ("is not fuse-%s.tar.gz (expected sha256 %s)" % (version, sha)) in r.stderr, r.stderr
    assert not prefix.exists()
    # what mcfs runs with: the pinned version where it is the private build
    stamp = "/opt/mcfs/libfuse/share/mcfs-libfuse.stamp"
    out = run(["readelf", "-d", MCFS]).stdout
    if "/opt/mcfs/libfuse/lib" in out and os.path.exists(stamp):
        v = run([MCFS, "--version"]).stdout
        assert re.search(r"^libfuse %s " % re.escape(version), v, re.M), v


# ---- the unit under a real systemd (issue 25, item 3) ----------------------------------

NSPAWN_CACHE = "/var/tmp/mcfs-nspawn"  # the Debian trees debootstrap made, kept per machine
NSPAWN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def deb_depends(deb):
    """The package names a .deb depends on (the first of each alternative)."""
    fields = run(["dpkg-deb", "-f", deb, "Depends"]).stdout
    return {d.split("|")[0].split()[0] for d in fields.split(",") if d.strip()}


def debian_mirror(codename):
    """The mirror apt uses here for @codename's main component (deb822 .sources
    or one-line .list), else deb.debian.org."""
    found = []
    for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*")):
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        if path.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if codename in fields.get("Suites", "").split() and \
                        "main" in fields.get("Components", "").split():
                    found += fields.get("URIs", "").split()
        else:
            for m in re.finditer(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)\s+(.*)$", text, re.M):
                if m.group(2) == codename and "main" in m.group(3).split():
                    found.append(m.group(1))
    return found[0] if found else "http://deb.debian.org/debian"


def nspawn_tree(deb):
    """A Debian of this machine's release with systemd and the package's
    dependencies (so that `dpkg -i` needs no network), made once per machine by
    debootstrap and kept under NSPAWN_CACHE, named by what it holds. Containers
    boot an ephemeral copy of it (systemd-nspawn -x)."""
    with open("/etc/os-release") as f:
        m = re.search(r"^VERSION_CODENAME=\"?(\w+)", f.read(), re.M)
    if not m:
        pytest.skip("no VERSION_CODENAME in /etc/os-release: debootstrap needs a Debian release")
    codename = m.group(1)
    include = sorted({"systemd", "systemd-sysv", "dbus"} | deb_depends(deb))
    name = hashlib.sha256((codename + " " + ",".join(include)).encode()).hexdigest()[:16]
    tree = os.path.join(NSPAWN_CACHE, "%s-%s" % (codename, name))
    if os.path.isfile(os.path.join(tree, "etc", "os-release")) or \
            os.path.islink(os.path.join(tree, "etc", "os-release")):
        return tree
    os.makedirs(NSPAWN_CACHE, mode=0o700, exist_ok=True)
    part = tempfile.mkdtemp(dir=NSPAWN_CACHE, prefix=".part-")
    try:
        r = run(["debootstrap", "--variant=minbase", "--include=" + ",".join(include), codename,
                 part, debian_mirror(codename)], timeout=1200)
        assert r.returncode == 0, "debootstrap %s failed:\n%s" % (codename, (r.stdout + r.stderr)[-4000:])
        os.rename(part, tree)
    finally:
        if os.path.exists(part):
            shutil.rmtree(part, ignore_errors=True)
    return tree


class Container:
    """A Debian booted with its own systemd as PID 1 (systemd-nspawn -b) on an
    ephemeral copy of @tree, with /dev/fuse and the given binds; commands run in
    it with nsenter. stop() powers it off (and kills it if it will not go)."""

    def __init__(self, tree, binds, log):
        self.log = log
        self.proc = subprocess.Popen(
            ["systemd-nspawn", "--quiet", "--directory", tree, "--ephemeral", "--boot",
             "--console=read-only", "--register=no", "--keep-unit", "--bind=/dev/fuse"]
            + ["--bind-ro=%s:%s" % b for b in binds],
            stdin=subprocess.DEVNULL, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
            start_new_session=True)
        self.init = None
        deadline = time.monotonic() + 120
        while self.init is None and time.monotonic() < deadline:
            assert self.proc.poll() is None, "systemd-nspawn exited:\n" + self.output()
            self.init = self.systemd(self.proc.pid)
            if self.init is None:
                time.sleep(0.1)
        assert self.init, "the container's init did not start:\n" + self.output()

    @staticmethod
    def systemd(pid):
        """The container's init once it runs systemd: a descendant of nspawn's."""
        try:
            with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            return None
        for k in kids:
            try:
                with open("/proc/%d/comm" % k) as f:
                    if f.read().strip() == "systemd":
                        return k
            except OSError:
                continue
            found = Container.systemd(k)
            if found:
                return found
        return None

    def output(self):
        with open(self.log, errors="replace") as f:
            return f.read()[-4000:]

    def sh(self, script, timeout=120, **kw):
        return run(["nsenter", "-t", str(self.init), "-m", "-u", "-i", "-n", "-p", "-C",
                    "sh", "-c", script], timeout=timeout,
                   env={"PATH": NSPAWN_PATH, "LANG": "C.UTF-8"}, **kw)

    def ok(self, script, timeout=120):
        r = self.sh(script, timeout)
        assert r.returncode == 0, "%s: exit %d\n%s%s" % (script, r.returncode, r.stdout, r.stderr)
        return r.stdout

    def stop(self):
        if self.proc.poll() is None and self.init:
            try:
                os.kill(self.init, signal.SIGRTMIN + 4)  # systemd: power off
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def test_unit_under_systemd(built, tmp_path):
    """The packaged unit, as installed by `dpkg -i`, in a Debian booted with
    systemd as PID 1 (systemd-nspawn): it starts and the mount serves the
    store's bytes; `systemd-analyze security` rates the unit as systemd loaded
    it at most 5.0; a reader that holds a file open through a kill -9 of the
    daemon reads on once systemd restarted it (the descriptor store); and a
    stop with a file open ends inactive with result success, not failed."""
    _, deb = built
    if os.geteuid() != 0:
        pytest.skip("boots a container with systemd-nspawn: needs root (CI's VM)")
    for tool in ("systemd-nspawn", "debootstrap", "nsenter"):
        if not shutil.which(tool):
            pytest.skip("%s is not installed (deploy/install-deps.sh test: systemd-container, "
                        "debootstrap, util-linux)" % tool)
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse here")
    tree = nspawn_tree(deb)
    models = tmp_path / "models"
    models.mkdir()
    data = os.urandom(5 << 20)
    other = os.urandom(3 << 20)
    (models / "model.bin").write_bytes(data)
    (models / "other.bin").write_bytes(other)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    shutil.copy(deb, str(pkg / "mcfs.deb"))
    leftovers = set(os.listdir(NSPAWN_CACHE))
    c = Container(tree, [(str(models), "/srv/models"), (str(pkg), "/pkg")],
                  str(tmp_path / "console.log"))
    try:
        deadline = time.monotonic() + 120
        while True:  # systemd's bus comes up a moment after it starts
            r = c.sh("systemctl is-system-running --wait", timeout=120)
            state = r.stdout.strip()
            if state or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert state in ("running", "degraded"), (state, r.stderr, c.output())
        c.ok("dpkg -i /pkg/mcfs.deb")
        # the unit's defaults: /srv/models on /mnt/models; a small RAM tier here
        c.ok("sed -i 's/^ram_cache *=.*/ram_cache = 64M/; s/^block_size *=.*/block_size = 1M/' "
             "/etc/mcfs/mcfs.conf")
        c.ok("systemctl start mcfs")
        assert c.ok("systemctl is-active mcfs").strip() == "active"
        c.ok("cmp /srv/models/model.bin /mnt/models/model.bin")

        out = c.ok("systemd-analyze security --no-pager mcfs.service")
        m = re.search(r"Overall exposure level for mcfs\.service: (\d+\.\d+)", out)
        assert m and float(m.group(1)) <= 5.0, out[-3000:]

        # other.bin is opened cold (its reads go through the daemon), read in
        # part, the daemon killed; systemd restarts it, and the reader goes on
        c.ok("exec 3</mnt/models/other.bin; head -c 1000000 <&3 >/tmp/got; "
             "systemctl kill -s KILL mcfs; "
             "i=0; until [ \"$(systemctl show -P NRestarts mcfs)\" = 1 ] && "
             "systemctl is-active -q mcfs; do i=$((i+1)); [ $i -lt 300 ] || exit 9; "
             "sleep 0.1; done; cat <&3 >>/tmp/got; cmp /tmp/got /srv/models/other.bin", 120)
        assert c.ok("systemctl show -P NRestarts mcfs").strip() == "1"
        assert "resumed the mount's connection" in c.ok("journalctl -u mcfs --no-pager")

        # a stop while a reader holds a file open
        c.ok("sh -c 'exec 3</mnt/models/model.bin; echo $$ >/tmp/holder; exec sleep 600' "
             ">/dev/null 2>&1 & i=0; until [ -e /tmp/holder ]; do i=$((i+1)); "
             "[ $i -lt 100 ] || exit 9; sleep 0.1; done")
        holder = c.ok("cat /tmp/holder").strip()
        assert c.ok("readlink /proc/%s/fd/3" % holder).strip() == "/mnt/models/model.bin"
        c.ok("systemctl stop mcfs")
        show = c.ok("systemctl show -p ActiveState -p Result mcfs").split()
        assert sorted(show) == ["ActiveState=inactive", "Result=success"], show
        c.ok("kill %s" % holder)
    finally:
        c.stop()
        # an ephemeral copy that a killed nspawn left behind
        for n in set(os.listdir(NSPAWN_CACHE)) - leftovers:
            shutil.rmtree(os.path.join(NSPAWN_CACHE, n), ignore_errors=True)
