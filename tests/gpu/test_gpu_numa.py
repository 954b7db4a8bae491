"""Issue 24, item 5: the RAM tier is placed near the GPUs on a host of several
NUMA nodes. The daemon reads each GPU's NUMA node from sysfs (its PCI
function's numa_node), logs the placement once, says it in the
ram_numa_nodes gauge, and prefers each range of the tier on the planned node
(mbind, seen in the daemon's /proc/PID/numa_maps as "prefer:N"). The plan
itself is unit-tested over described hosts (common/numa_test.c); this test
checks that the daemon reads the real host right and that loads into every
GPU still give the file's bytes. On a one-node host (the 2-GPU machine) it
checks that nothing is placed and the gauge says 1.
"""
import glob
import os
import re

from gpuutil import need_gpu, assert_same
from conftest import mcfs_mount, wait_for

import mcfs


def memory_nodes():
    """Ids of the NUMA nodes with memory, as sysfs lists them."""
    nodes = []
    for d in glob.glob("/sys/devices/system/node/node[0-9]*"):
        with open(os.path.join(d, "meminfo")) as f:
            m = re.search(r"MemTotal:\s+(\d+) kB", f.read())
        if m and int(m.group(1)) > 0:
            nodes.append(int(os.path.basename(d)[4:]))
    return sorted(nodes)


def pci_node(busid):
    try:
        with open("/sys/bus/pci/devices/%s/numa_node" % busid) as f:
            n = int(f.read())
    except OSError:
        return -1
    return n if n >= 0 else -1


def preferred_nodes(pid):
    """Nodes named by "prefer:N" policies in the process's mappings."""
    with open("/proc/%d/numa_maps" % pid) as f:
        return sorted({int(n) for n in re.findall(r"prefer(?:red)?:(\d+)", f.read())})


def test_ram_tier_is_placed_near_the_gpus(tmp):
    torch = need_gpu()
    from safetensors.torch import save_file
    n = torch.cuda.device_count()
    want = {"w": torch.arange(3 << 20, dtype=torch.float32), "b": torch.ones(777, dtype=torch.int8)}
    save_file(want, str(tmp / "src" / "m.safetensors"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=2G"]) as m:
        assert wait_for(lambda: m.stats()["ram_prefault"] == 2, timeout=300), (m.stats(), m.log())
        log = m.log()
        # every GPU's node, as the daemon read it, is sysfs's
        devs = re.findall(r"gpu: device (\d+): .*, PCI ([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2}), "
                          r"NUMA node (-?\d+)", log)
        assert len(devs) == n, log
        gpu_nodes = []
        for d, dom, bus, dev, node in devs:
            busid = "%s:%s:%s.0" % (dom, bus, dev)
            assert int(node) == pci_node(busid), (d, busid, log)
            gpu_nodes.append(int(node))
        assert log.count("RAM tier: NUMA placement: ") == 1, log
        mem = memory_nodes()
        st = m.stats()
        if len(mem) <= 1:
            assert "RAM tier: NUMA placement: no placement (one node with memory)" in log, log
            assert st["ram_numa_nodes"] == len(mem), st
            assert preferred_nodes(m.proc.pid) == [], "a one-node host places nothing"
        else:
            known = sorted({g for g in gpu_nodes if g in mem})
            expect = known if known and all(g in mem for g in gpu_nodes) else mem
            assert st["ram_numa_nodes"] == len(expect), (st, expect, log)
            assert preferred_nodes(m.proc.pid) == expect, (expect, log)
        for d in range(n):
            got = mcfs.load_file(m.p("m.safetensors"), device="cuda:%d" % d)
            assert_same(torch, got, {k: v.to("cuda:%d" % d) for k, v in want.items()})
