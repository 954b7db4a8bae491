"""The s3 store end to end, against OpenStack Swift with s3api on loopback: a
real object store that verifies SigV4 signatures. The suite starts memcached
and the four Swift servers itself (about 10 s, once per module), fills a
bucket with boto3, and mounts s3://bucket[/prefix] with mcfs.

Checked: the posix store's byte checks, listings of more than 1000 keys
(continuation tokens), credentials from the environment, the options and a
~/.aws/credentials profile, a wrong secret failing the mount with a clear
message, the server going away mid-read (EIO, then reads work again without a
remount), injected 503s and dropped connections (faultproxy.py), and an object
replaced mid-read (EIO, then the new bytes after a reopen).
"""
import concurrent.futures
import errno
import os

import pytest

import remote_checks as rc
from conftest import mcfs_mount, need_root
from faultproxy import FaultProxy
from servers import SWIFT_KEY, SWIFT_SECRET, Swift, have_swift

pytestmark = pytest.mark.skipif(not have_swift(), reason="swift/memcached not installed "
                                "(deploy/install-deps.sh test installs them)")

BUCKET = "models"
OPTS = ["block_size=1M", "ram_cache=64M", "retries=3", "connect_timeout=2", "timeout=10"]


@pytest.fixture(scope="module")
def swift(tmp_path_factory):
    need_root()
    sw = Swift(str(tmp_path_factory.mktemp("swift"))).start()
    try:
        s3 = sw.s3()
        s3.create_bucket(Bucket=BUCKET)
        files = {}
        for name, size in rc.SIZES.items():
            files["m/" + name] = rc.data_for(name, size)
        files["m/sub dir/a+b=c.bin"] = rc.data_for("nested", 300000)
        files["top.txt"] = b"top\n"
        for k, v in files.items():
            s3.put_object(Bucket=BUCKET, Key=k, Body=v)
        sw.files = files
        yield sw
    finally:
        sw.stop()


def env_for(sw, **extra):
    e = {"AWS_ACCESS_KEY_ID": SWIFT_KEY, "AWS_SECRET_ACCESS_KEY": SWIFT_SECRET,
         "AWS_REGION": "us-east-1", "AWS_PROFILE": "", "AWS_ENDPOINT_URL": ""}
    e.update(extra)
    return e


def opts_for(sw, endpoint=None, extra=()):
    return OPTS + ["endpoint=" + (endpoint or sw.endpoint)] + list(extra)


def test_bytes_and_listing(swift, tmp_path):
    files = {k[2:]: v for k, v in swift.files.items() if k.startswith("m/")}
    with mcfs_mount("s3://%s/m" % BUCKET, str(tmp_path / "mnt"), opts=opts_for(swift),
                    env=env_for(swift)) as m:
        assert sorted(os.listdir(m.path)) == sorted(list(rc.SIZES) + ["sub dir"])
        assert os.listdir(m.p("sub dir")) == ["a+b=c.bin"]
        for name, data in files.items():
            assert os.stat(m.p(name)).st_size == len(data)
        rc.check_whole_files(m.path, files)
        rc.check_random_ranges(m.p("multi.bin"), files["multi.bin"])
        rc.check_concurrent(m.p("multi.bin"), files["multi.bin"])
        rc.check_mmap(m.p("block-plus-1.bin"), files["block-plus-1.bin"])
        with pytest.raises(FileNotFoundError):
            os.stat(m.p("nope"))
    # the bucket's root, with the endpoint from the environment
    with mcfs_mount("s3://" + BUCKET, str(tmp_path / "mnt"), opts=OPTS,
                    env=env_for(swift, AWS_ENDPOINT_URL=swift.endpoint)) as m:
        assert sorted(os.listdir(m.path)) == ["m", "top.txt"]
        with open(m.p("top.txt"), "rb") as f:
            assert f.read() == b"top\n"


def test_listing_over_1000(swift, tmp_path):
    s3 = swift.s3()
    n = 1100
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda i: s3.put_object(Bucket=BUCKET, Key="many/k%05d" % i,
                                            Body=b"%d" % i), range(n)))
    with mcfs_mount("s3://%s/many" % BUCKET, str(tmp_path / "mnt"), opts=opts_for(swift),
                    env=env_for(swift)) as m:
        names = os.listdir(m.path)
        assert len(names) == n
        assert "k01099" in names
        with open(m.p("k01050"), "rb") as f:
            assert f.read() == b"1050"


def test_credentials_from_options_and_profile(swift, tmp_path):
    # options (the environment holds a wrong key, which the options override)
    bad = env_for(swift, AWS_ACCESS_KEY_ID="wrong", AWS_SECRET_ACCESS_KEY="wrong")
    with mcfs_mount("s3://" + BUCKET, str(tmp_path / "mnt"), env=bad,
                    opts=opts_for(swift, extra=["access_key=" + SWIFT_KEY,
                                                "secret_key=" + SWIFT_SECRET])) as m:
        assert "top.txt" in os.listdir(m.path)
        assert SWIFT_SECRET not in m.log()
    # a profile in a shared credentials file
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n"
        "[swift]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
        % (SWIFT_KEY, SWIFT_SECRET))
    env = {"HOME": str(home), "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "",
           "AWS_PROFILE": "swift", "AWS_SHARED_CREDENTIALS_FILE": "", "AWS_ENDPOINT_URL": ""}
    with mcfs_mount("s3://" + BUCKET, str(tmp_path / "mnt"), env=env,
                    opts=opts_for(swift)) as m:
        assert "top.txt" in os.listdir(m.path)
        assert "profile 'swift'" in m.log()
    # the config file (-c), over a wrong key in the environment; mode 0600, as
    # a file holding a secret should be
    conf = tmp_path / "mcfs.conf"
    conf.write_text("[mcfs]\nendpoint = %s\naccess_key = %s\nsecret_key = %s\n"
                    % (swift.endpoint, SWIFT_KEY, SWIFT_SECRET))
    os.chmod(conf, 0o600)
    with mcfs_mount("s3://" + BUCKET, str(tmp_path / "mnt"), env=bad, opts=OPTS,
                    extra_args=["-c", str(conf)]) as m:
        assert "top.txt" in os.listdir(m.path)
        assert SWIFT_SECRET not in m.log()


def test_wrong_secret_fails_mount(swift, tmp_path):
    env = env_for(swift, AWS_SECRET_ACCESS_KEY="not-the-secret")
    with pytest.raises(RuntimeError) as ei:
        with mcfs_mount("s3://" + BUCKET, str(tmp_path / "mnt"), opts=opts_for(swift),
                        env=env):
            pass
    msg = str(ei.value)
    assert "S3 refused the credentials (SignatureDoesNotMatch)" in msg
    assert "not-the-secret" not in msg


def test_server_stopped_mid_read(swift, tmp_path):
    data = swift.files["m/multi.bin"]
    with mcfs_mount("s3://%s/m" % BUCKET, str(tmp_path / "mnt"), env=env_for(swift),
                    opts=opts_for(swift, extra=["readahead_max=0", "retries=2"])) as m:
        fd = os.open(m.p("multi.bin"), os.O_RDONLY)
        try:
            assert os.pread(fd, 4096, 0) == data[:4096]
            swift.stop_proxy()
            try:
                with pytest.raises(OSError) as ei:
                    os.pread(fd, 4096, 3 * rc.BLOCK)
                assert ei.value.errno == errno.EIO
            finally:
                swift.start_proxy()
            assert os.pread(fd, 4096, 3 * rc.BLOCK) == data[3 * rc.BLOCK:3 * rc.BLOCK + 4096]
        finally:
            os.close(fd)


def test_503_and_drops_are_retried(swift, tmp_path):
    data = swift.files["m/multi.bin"]
    with FaultProxy(swift.port) as px:
        with mcfs_mount("s3://%s/m" % BUCKET, str(tmp_path / "mnt"), env=env_for(swift),
                        opts=opts_for(swift, endpoint=px.url,
                                      extra=["readahead_max=0", "retries=5"])) as m:
            fd = os.open(m.p("multi.bin"), os.O_RDONLY)
            try:
                px.fail_503 = 3
                assert os.pread(fd, 4096, 0) == data[:4096]
                px.drop = 2
                assert os.pread(fd, 4096, 2 * rc.BLOCK) == data[2 * rc.BLOCK:2 * rc.BLOCK + 4096]
                px.fail_503, px.drop = 1, 1
                rc.check_random_ranges(m.p("multi.bin"), data, n=20)
            finally:
                os.close(fd)
            st = m.stats()
        assert px.counts["503"] >= 4 and px.counts["dropped"] >= 3, px.counts
        assert st["store_retries"] >= 7, st


def test_replaced_mid_read(swift, tmp_path):
    s3 = swift.s3()
    old = rc.data_for("replace-old", 6 * rc.BLOCK)
    new = rc.data_for("replace-new", 6 * rc.BLOCK)
    s3.put_object(Bucket=BUCKET, Key="r/obj.bin", Body=old)
    opts = opts_for(swift, extra=["readahead_max=0", "attr_ttl=0", "keep_cache=false"])
    with mcfs_mount("s3://%s/r" % BUCKET, str(tmp_path / "mnt"), env=env_for(swift),
                    opts=opts) as m:
        fd = os.open(m.p("obj.bin"), os.O_RDONLY)
        try:
            assert os.pread(fd, 4096, 0) == old[:4096]
            s3.put_object(Bucket=BUCKET, Key="r/obj.bin", Body=new)
            with pytest.raises(OSError) as ei:
                os.pread(fd, 4096, 4 * rc.BLOCK)
            assert ei.value.errno == errno.EIO
        finally:
            os.close(fd)
        assert "changed on the store" in m.log()
        with open(m.p("obj.bin"), "rb") as f:
            assert rc.sha(f.read()) == rc.sha(new)


def test_escaping_keys_refused(swift, tmp_path):
    s3 = swift.s3()
    for key in ("esc/ok.txt", "esc/../evil", "esc//double", "esc/./dot"):
        try:
            s3.put_object(Bucket=BUCKET, Key=key, Body=b"x")
        except Exception:  # noqa: BLE001 - a server may refuse such keys itself
            pass
    with mcfs_mount("s3://%s/esc" % BUCKET, str(tmp_path / "mnt"), env=env_for(swift),
                    opts=opts_for(swift)) as m:
        names = os.listdir(m.path)
        assert "ok.txt" in names
        assert ".." not in names and "." not in names and "" not in names
        log = m.log()
    if "evil" in str(s3.list_objects_v2(Bucket=BUCKET, Prefix="esc/")):
        assert "refused" in log


def test_listing_one_entry_per_name(swift, tmp_path):
    """An object "dup" beside objects under "dup/": ListObjectsV2 lists the name
    as a key and as a common prefix. readdir shows it once, as the object (a
    lookup HEADs it and finds the object), and the daemon says so. A key whose
    name is 300 bytes is refused with a log line naming why."""
    s3 = swift.s3()
    long_name = "L" * 300
    data = rc.data_for("dup", 5000)
    s3.put_object(Bucket=BUCKET, Key="lst/dup", Body=data)
    s3.put_object(Bucket=BUCKET, Key="lst/dup/inner.bin", Body=b"inner")
    s3.put_object(Bucket=BUCKET, Key="lst/ok.bin", Body=b"ok")
    s3.put_object(Bucket=BUCKET, Key="lst/" + long_name, Body=b"long")
    with mcfs_mount("s3://%s/lst" % BUCKET, str(tmp_path / "mnt"), env=env_for(swift),
                    opts=opts_for(swift)) as m:
        names = os.listdir(m.path)
        assert sorted(names) == ["dup", "ok.bin"], names
        assert os.path.isfile(m.p("dup"))
        with open(m.p("dup"), "rb") as f:
            assert f.read() == data
        log = m.log()
    assert "'dup' twice" in log and "shown once, as a file" in log, log
    assert "longer than 255 bytes" in log and long_name[:40] in log, log
