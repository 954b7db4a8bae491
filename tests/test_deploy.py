"""Deployment files (issue 7): the systemd unit, the Kubernetes manifests and
the example config are checked with the tools that would reject them in
production: `systemd-analyze verify`, the Kubernetes API schemas
(kubernetes-validate, offline) and the daemon's own config parser. The quick
start (issue 16) is run, and every command it prints is run as printed.
"""
import os
import re
import shutil
import socket
import subprocess
import urllib.request

import pytest

from conftest import MCFS, ROOT, cleanup_daemon, fuse_mounted, mcfs_mount, need_root

yaml = pytest.importorskip("yaml", reason="PyYAML (pip) parses the manifests")

DEPLOY = os.path.join(ROOT, "deploy")
UNIT = os.path.join(DEPLOY, "mcfs.service")
CONF = os.path.join(DEPLOY, "mcfs.conf.example")
DAEMONSET = os.path.join(DEPLOY, "k8s", "daemonset.yaml")
POD = os.path.join(DEPLOY, "k8s", "example-pod.yaml")
INSTALLED_BIN = "/usr/local/bin/mcfs"


# ---- systemd ---------------------------------------------------------------

def test_unit_verifies(tmp_path):
    """`systemd-analyze verify` accepts the unit with no warning at all.

    verify needs the ExecStart binary to exist: the unit is rendered with the
    built binary's path in place of /usr/local/bin/mcfs.
    """
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze not installed (deploy/install-deps.sh test)")
    if not os.access(MCFS, os.X_OK):
        pytest.skip("mcfs not built at %s" % MCFS)
    with open(UNIT) as f:
        text = f.read()
    assert INSTALLED_BIN in text
    unit = tmp_path / "mcfs.service"
    unit.write_text(text.replace(INSTALLED_BIN, os.path.abspath(MCFS)))
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == 0, out
    # unknown keys and bad values are only warnings for verify: allow none
    assert out == "", out


def unit_settings():
    sections, cur = {}, None
    with open(UNIT) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            m = re.match(r"^\[(\w+)\]$", line)
            if m:
                cur = sections.setdefault(m.group(1), {})
                continue
            k, v = line.split("=", 1)
            cur.setdefault(k, []).append(v)
    return sections


def test_unit_contract():
    s = unit_settings()
    svc = s["Service"]
    assert svc["Type"] == ["forking"]          # mount errors reach systemctl start
    assert svc["Restart"] == ["on-failure"]
    assert svc["CacheDirectory"] == ["mcfs"]
    assert "network-online.target" in " ".join(s["Unit"]["After"])
    start = svc["ExecStart"][0]
    assert start.startswith(INSTALLED_BIN + " mount ") and "-c /etc/mcfs/mcfs.conf" in start
    assert " -f" not in start                   # forking: the daemon daemonises itself
    # a stop is SIGTERM, which unmounts lazily and exits 0 (a `mcfs umount`
    # would fail with files open, and the unit with it)
    assert "ExecStop" not in svc
    # a restart resumes the held mount: nothing unmounts it first
    assert not any(" umount " in p for p in svc["ExecStartPre"])
    # the mount's descriptors kept across restarts, stored by the daemonised process
    assert svc["FileDescriptorStoreMax"] == ["2"] and svc["NotifyAccess"] == ["all"]
    # a private mount namespace would hide the mount from the host
    for key in ("PrivateTmp", "ProtectSystem", "ProtectHome", "PrivateDevices",
                "ReadOnlyPaths", "ReadWritePaths", "InaccessiblePaths", "TemporaryFileSystem",
                "BindPaths", "PrivateMounts", "MountFlags"):
        assert key not in svc, key
    assert s["Install"]["WantedBy"] == ["multi-user.target"]
    # so do device policies: /dev/fuse and the GPUs must stay open
    for key in ("DevicePolicy", "DeviceAllow", "ProtectClock", "ProtectKernelTunables",
                "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups"):
        assert key not in svc, key
    # SIGHUP re-confirms metadata; a reload never unmounts
    assert svc["ExecReload"] == ["/bin/kill -HUP $MAINPID"]


def test_unit_hardening():
    """The sandbox the daemon can live with: no new privileges, only the capabilities it
    uses, the system calls of a service plus mount, four address families, umask 0077."""
    svc = unit_settings()["Service"]
    assert svc["NoNewPrivileges"] == ["yes"]
    assert sorted(svc["CapabilityBoundingSet"][0].split()) == sorted(
        ["CAP_SYS_ADMIN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE",
         "CAP_IPC_LOCK"])
    assert svc["SystemCallFilter"] == ["@system-service @mount"]
    # a call outside the list fails; it does not kill the daemon and every mount with it
    assert svc["SystemCallErrorNumber"] == ["EPERM"]
    assert svc["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6 AF_NETLINK"]
    assert svc["UMask"] == ["0077"]
    # the mount point's missing parents are made traversable despite UMask
    assert any("umask 022" in p and "mkdir -p" in p for p in svc["ExecStartPre"])


def test_unit_security_score():
    """`systemd-analyze security` rates the unit at most 5.0 (it was 9.6 UNSAFE)."""
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze not installed (deploy/install-deps.sh test)")
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", UNIT],
                       capture_output=True, text=True)
    out = r.stdout + r.stderr
    if "--offline" in out and ("unrecognized" in out or "unknown" in out):
        pytest.skip("systemd-analyze has no --offline (systemd < 250)")
    m = re.search(r"Overall exposure level for mcfs\.service: (\d+\.\d+)", out)
    assert m, out
    assert float(m.group(1)) <= 5.0, out


# ---- Kubernetes ------------------------------------------------------------

def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


@pytest.mark.parametrize("path", [DAEMONSET, POD])
def test_manifest_schema(path):
    """Every object validates against the Kubernetes API schema, strictly."""
    kv = pytest.importorskip("kubernetes_validate",
                             reason="kubernetes-validate (pip) ships the API schemas")
    docs = load_all(path)
    assert docs
    version = kv.latest_version()
    for doc in docs:
        # raises ValidationError with the offending field path
        kv.validate(doc, version, strict=True)


def container(docs, kind):
    obj = [d for d in docs if d["kind"] == kind]
    assert len(obj) == 1
    spec = obj[0]["spec"]
    if kind == "DaemonSet":
        spec = spec["template"]["spec"]
    return obj[0], spec, spec["containers"][0]


def test_daemonset_contract():
    docs = load_all(DAEMONSET)
    ds, spec, c = container(docs, "DaemonSet")
    assert c["securityContext"]["privileged"] is True
    assert spec["nodeSelector"].get("nvidia.com/gpu.present") == "true"
    vols = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    models = mounts["/mnt/models"]
    assert models["mountPropagation"] == "Bidirectional"
    assert vols[models["name"]]["hostPath"]["path"] == "/mnt/models"
    fuse = mounts["/dev/fuse"]
    assert vols[fuse["name"]]["hostPath"] == {"path": "/dev/fuse", "type": "CharDevice"}
    cache = mounts["/var/cache/mcfs"]
    assert "hostPath" in vols[cache["name"]]
    conf = mounts["/etc/mcfs"]
    cm_name = vols[conf["name"]]["configMap"]["name"]
    assert c["lifecycle"]["preStop"]["exec"]["command"][-2:] == ["umount", "/mnt/models"]
    script = " ".join(c.get("command", []) + c.get("args", []))
    assert "mcfs mount" in script and " -f " in script and "/etc/mcfs/mcfs.conf" in script
    # the supervisor holds the mount: a crashed daemon is replaced, readers pause
    assert "supervise=true" in script
    # the ConfigMap the pod mounts exists and is a config mcfs accepts (checked below)
    cms = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == cm_name]
    assert len(cms) == 1 and "mcfs.conf" in cms[0]["data"]
    assert re.search(r"^allow_other\s*=\s*true$", cms[0]["data"]["mcfs.conf"], re.M)


def test_daemonset_operability():
    """Issue 25: the daemon is evicted last, holds no API token, runs in a namespace that
    admits it, and a busy daemon is not restarted by its probes (a restart unmounts the node's
    models)."""
    docs = load_all(DAEMONSET)
    ds, spec, c = container(docs, "DaemonSet")
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["automountServiceAccountToken"] is False
    ns = [d for d in docs if d["kind"] == "Namespace"]
    assert len(ns) == 1 and ns[0]["metadata"]["name"] == ds["metadata"]["namespace"]
    assert ns[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    live = c["livenessProbe"]
    assert live["httpGet"] == {"path": "/metrics", "port": "metrics"}
    assert live["timeoutSeconds"] == 10 and live["failureThreshold"] == 10
    assert live["periodSeconds"] == 30
    # at least 5 minutes without an answer before a restart
    assert live["periodSeconds"] * live["failureThreshold"] >= 300
    ready = c["readinessProbe"]
    assert "/proc/mounts" in " ".join(ready["exec"]["command"])
    assert ready["timeoutSeconds"] == 5


def test_example_pod_security():
    """Issue 25: the inference pod runs in its own namespace that enforces `privileged`
    (hostPath) and warns and audits at `restricted`, and meets `restricted` in all but the
    hostPath volume."""
    docs = load_all(POD)
    pod, spec, c = container(docs, "Pod")
    ns = [d for d in docs if d["kind"] == "Namespace"]
    assert len(ns) == 1 and ns[0]["metadata"]["name"] == pod["metadata"]["namespace"]
    assert ns[0]["metadata"]["name"] != "default"
    assert ns[0]["metadata"]["labels"] == {
        "pod-security.kubernetes.io/enforce": "privileged",
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
    }
    assert spec["automountServiceAccountToken"] is False
    psc = spec["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    csc = c["securityContext"]
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in csc
    # restricted's volume types, plus the one hostPath it exists for
    allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
               "persistentVolumeClaim", "projected", "secret"}
    host = []
    for v in spec["volumes"]:
        kinds = set(v) - {"name"}
        if kinds == {"hostPath"}:
            host.append(v["hostPath"]["path"])
        else:
            assert kinds <= allowed, v
    assert host == ["/mnt/models"]
    mounts = [m for m in c["volumeMounts"] if m["mountPath"] == "/mnt/models"]
    assert len(mounts) == 1 and mounts[0]["readOnly"] is True


def test_example_pod_contract():
    docs = load_all(POD)
    pod, spec, c = container(docs, "Pod")
    vols = {v["name"]: v for v in spec["volumes"]}
    m = [m for m in c["volumeMounts"] if m["mountPath"] == "/mnt/models"][0]
    assert m["mountPropagation"] == "HostToContainer"
    assert m.get("readOnly") is True
    assert vols[m["name"]]["hostPath"]["path"] == "/mnt/models"
    assert spec["nodeSelector"].get("nvidia.com/gpu.present") == "true"
    script = "\n".join(c.get("args", []))
    compile(script, "example-pod", "exec")     # the embedded loader is valid Python
    assert "mcfs.load_file" in script and "safetensors" in script


# ---- example config ----------------------------------------------------------

def cfg_keys():
    """Every key of config/cfg.c's table: the source of truth."""
    with open(os.path.join(ROOT, "config", "cfg.c")) as f:
        keys = re.findall(r'^\s*\{"(\w+)", KEY_\w+,', f.read(), re.M)
    assert len(keys) > 20
    return keys


def conf_keys(path):
    with open(path) as f:
        return re.findall(r"^(\w+)\s*=", f.read(), re.M)


def test_example_config_documents_every_key():
    keys, have = cfg_keys(), conf_keys(CONF)
    assert sorted(set(keys) - set(have)) == [], "undocumented keys"
    assert sorted(set(have) - set(keys)) == [], "keys mcfs does not know"
    assert len(have) == len(set(have)), "a key is set twice"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_conf(tmp_path, text, port):
    """The example with machine-local values: a scratch cache_dir and a free port."""
    text = re.sub(r"^cache_dir\s*=.*$", "cache_dir = %s" % (tmp_path / "cache"), text,
                  flags=re.M)
    text = re.sub(r"^metrics\s*=.*$", "metrics = 127.0.0.1:%d" % port, text, flags=re.M)
    (tmp_path / "cache").mkdir(exist_ok=True)
    conf = tmp_path / "mcfs.conf"
    conf.write_text(text)
    return conf


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.read().decode()


def gauge(text, name):
    m = re.search(r"^%s(\{[^}]*\})? (\S+)$" % re.escape(name), text, re.M)
    assert m, "%s missing:\n%s" % (name, text)
    return float(m.group(2))


@pytest.mark.parametrize("which", ["example", "configmap"])
def test_config_accepted_by_daemon(tmp, which):
    """The daemon mounts with the example config (and the DaemonSet's), every key parsed,
    and values from the file take effect (seen through the metrics port the file sets)."""
    need_root()
    (tmp / "src" / "a.txt").write_bytes(b"hello")
    if which == "example":
        with open(CONF) as f:
            text = f.read()
        # one value changed from its default, to see that the file is applied
        text = re.sub(r"^block_size\s*=.*$", "block_size = 4M", text, flags=re.M)
        text = re.sub(r"^ram_cache\s*=.*$", "ram_cache = 96M", text, flags=re.M)
        want_bs, want_ram = 4 << 20, 96 << 20
    else:
        cms = [d for d in load_all(DAEMONSET) if d["kind"] == "ConfigMap"]
        text = cms[0]["data"]["mcfs.conf"]
        text = re.sub(r"^ram_cache\s*=.*$", "ram_cache = 64M", text, flags=re.M)
        want_bs, want_ram = 8 << 20, 64 << 20
    port = free_port()
    conf = render_conf(tmp, text, port)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), extra_args=["-c", str(conf)]) as m:
        with open(m.p("a.txt"), "rb") as f:
            assert f.read() == b"hello"
        text = scrape(port)
        assert gauge(text, "mcfs_cache_block_size_bytes") == want_bs
        assert gauge(text, "mcfs_cache_capacity_bytes") == want_ram
        # allow_other = true took effect: the kernel shows it among the mount's options
        with open("/proc/mounts") as f:
            opts = [ln.split()[3] for ln in f if ln.split()[1] == str(tmp / "mnt")]
        assert opts and "allow_other" in opts[0], opts


# ---- quick start (issue 16, item 10) -------------------------------------------

QUICKSTART = os.path.join(DEPLOY, "quickstart.sh")


def run_quickstart(args=(), **env_extra):
    """quickstart.sh with the built binary (MCFS_BIN: nothing installed or built)."""
    env = dict(os.environ)
    env.pop("MCFS_DEMO_DIR", None)
    env.update(MCFS_BIN=os.path.abspath(MCFS), **env_extra)
    r = subprocess.run(["bash", QUICKSTART, *args], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"^mcfs is mounted: (.*) -> (.*)$", r.stdout, re.M)
    assert m, r.stdout
    return r.stdout, m.group(1), m.group(2)


def printed_commands(out):
    """The command lines quickstart.sh prints: indented, not comments."""
    return [ln.strip() for ln in out.splitlines()
            if ln.startswith("  ") and ln.strip() and not ln.strip().startswith("#")]


def run_printed(cmd):
    """Runs a printed line as a user would paste it, with only what `install-deps.sh build`
    brings: python3 runs with -S (no site-packages, so no numpy or safetensors)."""
    cmd = cmd.replace("python3 -c", "python3 -S -c")
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOME": os.environ.get("HOME", "/root")}
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, "printed command failed: %s\n%s" % (cmd, r.stdout + r.stderr)
    return r.stdout


def test_quickstart_demo_prints_what_works():
    """The demo mounts in a new private directory (not a fixed /tmp/mcfs-demo), and every
    command it prints runs as printed: the tensor listing included."""
    need_root()
    if not shutil.which("mountpoint"):
        pytest.skip("mountpoint (util-linux) not installed")
    out, src, mnt = run_quickstart()
    work = os.path.dirname(mnt)
    try:
        assert work != "/tmp/mcfs-demo" and work.startswith("/tmp/mcfs-demo."), work
        assert os.stat(work).st_mode & 0o077 == 0, oct(os.stat(work).st_mode)
        assert src == os.path.join(work, "store")
        cmds = printed_commands(out)
        py = [c for c in cmds if "python3" in c]
        assert len(py) == 1 and "safetensors import" not in py[0] and "numpy" not in py[0], py
        listing = None
        for c in cmds:
            got = run_printed(c)
            if c in py:
                listing = got
        assert "embed.weight BF16 (4096, 512)" in listing, listing
        assert "head.weight F16 (512, 1000)" in listing, listing
        # the last line unmounted and removed the demo
        assert not fuse_mounted(mnt) and not os.path.exists(work)
    finally:
        cleanup_daemon(mnt)
        shutil.rmtree(work, ignore_errors=True)


def test_quickstart_own_source(tmp):
    """SOURCE [MOUNTPOINT]: no demo model lines; MCFS_DEMO_DIR places the mount point."""
    need_root()
    if not shutil.which("mountpoint"):
        pytest.skip("mountpoint (util-linux) not installed")
    (tmp / "src" / "a.txt").write_bytes(b"hello")
    mnt = str(tmp / "mnt")
    try:
        out, src, got_mnt = run_quickstart([str(tmp / "src"), mnt])
        assert got_mnt == mnt
        assert "safetensors" not in out and "demo-model" not in out and "python3" not in out, out
        assert open(os.path.join(mnt, "a.txt"), "rb").read() == b"hello"
        for c in printed_commands(out):
            if "<" not in c:  # "cp MNT/<FILE> <DEST>" is a pattern, not a command
                run_printed(c)
        assert not fuse_mounted(mnt)
        demo = tmp / "demo"
        out, src, got_mnt = run_quickstart([str(tmp / "src")], MCFS_DEMO_DIR=str(demo))
        assert got_mnt == str(demo / "mnt"), got_mnt
        assert "safetensors" not in out, out
        for c in printed_commands(out):
            if "<" not in c:
                run_printed(c)
        assert not fuse_mounted(got_mnt)
    finally:
        cleanup_daemon(mnt)
        cleanup_daemon(str(tmp / "demo" / "mnt"))
