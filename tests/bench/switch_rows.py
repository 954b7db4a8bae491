"""Rows of tests/bench/bench_gpu.py for the safetensors switch
(mcfs.patch_safetensors, gpu/python/mcfs/_switch.py), each with the switch
off and on, from one mount whose RAM tier holds every file:

  safetensors load_file   safetensors.torch.load_file(mount path, device="cuda:0"),
                          in the bench's process (the switch turned on and off there)
  transformers            AutoModelForCausalLM.from_pretrained(device_map="cuda",
                          dtype=bfloat16) of a saved Llama-like model in several shards
  diffusers               UNet2DConditionModel.from_pretrained(device_map="cuda") of
                          a saved float16 UNet of Stable Diffusion 1's layout (one file)

The framework loads run in a process of their own each (the switch patches
process-wide; CUDA is initialised before the clock starts) and are timed
around from_pretrained alone; GB/s are the model's safetensors bytes over
that time. With the switch off, the page cache is dropped before each run,
so the bytes come through FUSE from the RAM tier; with it on, by the ioctl.
The note says whether the loaded weights were equal (a checksum of every
tensor's bytes, computed on the GPU) to the switch-off load.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))

from conftest import mcfs_mount  # noqa: E402

MAKE = r"""
import os, sys, torch
kind, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
if kind == "transformers":
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=8, vocab_size=32000)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, max_shard_size="500MB")
else:
    from diffusers import UNet2DConditionModel
    with torch.device("cuda"):
        model = UNet2DConditionModel().half()
    model.save_pretrained(out)
"""

LOAD = r"""
import hashlib, json, sys, time, torch
kind, switch, path = sys.argv[1:4]
if switch == "on":
    import mcfs
    mcfs.patch_safetensors()
torch.empty(1, device="cuda:0")
if kind == "transformers":
    from transformers import AutoModelForCausalLM as cls
    kw = {"dtype": torch.bfloat16}
else:
    from diffusers import UNet2DConditionModel as cls
    kw = {}
torch.cuda.synchronize()
t0 = time.perf_counter()
model = cls.from_pretrained(path, device_map="cuda", **kw)
torch.cuda.synchronize()
t = time.perf_counter() - t0
h = hashlib.sha256()
for k, v in sorted(model.state_dict().items()):
    assert v.device.type == "cuda", (k, v.device)
    b = v.detach().contiguous().view(-1).view(torch.uint8).to(torch.int64)
    w = torch.arange(b.numel(), device=b.device) % 65521 + 1
    h.update(("%s %s %d %d\n" % (k, v.dtype, int(b.sum()), int((b * w).sum()))).encode())
print(json.dumps({"s": t, "sum": h.hexdigest()}))
"""


def log(*a):
    print(*a, flush=True)


def _py(code, *args, timeout=600):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(ROOT, "gpu", "python")]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("MCFS_SAFETENSORS", None)
    env["HF_HUB_OFFLINE"] = "1"  # local models only
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                         text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError("%s failed:\n%s" % (" ".join(args), out.stderr[-4000:]))
    return out.stdout


def _st_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
               if f.endswith(".safetensors"))


def _warm(paths):
    for p in paths:  # into the RAM tier, through the mount
        subprocess.run(["cat", p], stdout=subprocess.DEVNULL, check=True)


def _framework_rows(row, a, kind, label, mdir, drop_caches):
    """Alternates switch-off and switch-on loads, a.switch_runs of each."""
    size = _st_bytes(mdir)
    res = {"off": [], "on": []}
    for _ in range(a.switch_runs):
        for switch in ("off", "on"):
            if switch == "off":
                drop_caches()
            res[switch].append(json.loads(_py(LOAD, kind, switch, mdir).splitlines()[-1]))
    sums = {r["sum"] for r in res["off"]}
    same = len(sums) == 1 and all(r["sum"] in sums for r in res["on"])
    runs = {s: ", ".join("%.2f s" % r["s"] for r in res[s]) for s in res}
    row("%s, switch off" % label, [r["s"] for r in res["off"]], size,
        "through FUSE, page cache dropped; runs: %s" % runs["off"])
    row("%s, switch on" % label, [r["s"] for r in res["on"]], size,
        "equal to switch off: %s; runs: %s" % ("yes" if same else "NO", runs["on"]))
    return same


def rows(row, a, src, timed_load, wait_pinned, drop_caches):
    import torch
    import mcfs
    from safetensors.torch import load_file as st_load

    models = {"transformers": os.path.join(src, "llama"), "diffusers": os.path.join(src, "unet")}
    for kind, d in models.items():
        t0 = time.time()
        _py(MAKE, kind, d)
        log("made the %s model: %d bytes of safetensors in %s, %.1f s" %
            (kind, _st_bytes(d), d, time.time() - t0))
    files = [os.path.join(src, "model.safetensors")] + [
        os.path.join(d, f) for d in models.values() for f in sorted(os.listdir(d))
        if f.endswith(".safetensors")]
    total = sum(os.path.getsize(f) for f in files)
    mnt = os.path.join(os.path.dirname(src), "mnt-switch")
    os.makedirs(mnt, exist_ok=True)
    opts = ["ram_cache=%d" % (((total >> 30) + 3) << 30), "readahead_max=256M"]
    failed = False
    with mcfs_mount(src, mnt, opts=opts, timeout=60) as m:
        on_mnt = [os.path.join(mnt, os.path.relpath(f, src)) for f in files]
        _warm(on_mnt)
        wait_pinned(on_mnt[0])
        mp = on_mnt[0]

        def sums(t):
            return {k: int(torch.sum(v.reshape(-1).view(torch.uint8), dtype=torch.int64))
                    for k, v in t.items() if v.numel()}

        want = sums(st_load(mp, device="cuda:0"))
        torch.cuda.empty_cache()
        ts, n = [], 0
        for _ in range(2):
            drop_caches()
            t, n = timed_load(st_load, mp)
            ts.append(t)
        row("safetensors load_file via mount, switch off", ts, n,
            "through FUSE, page cache dropped; runs: %s" % ", ".join("%.2f s" % t for t in ts))
        mcfs.patch_safetensors()
        try:
            got = sums(st_load(mp, device="cuda:0"))
            torch.cuda.empty_cache()
            ts = [timed_load(st_load, mp)[0] for _ in range(a.runs)]
        finally:
            mcfs.unpatch_safetensors()
        row("safetensors load_file via mount, switch on", ts, n,
            "equal to switch off: %s" % ("yes" if got == want else "NO"))
        failed |= got != want
        llama = os.path.join(mnt, "llama")
        nshards = len([f for f in os.listdir(llama) if f.endswith(".safetensors")])
        failed |= not _framework_rows(
            row, a, "transformers", "transformers from_pretrained, Llama %.2f GB, %d shards"
            % (_st_bytes(llama) / 1e9, nshards), llama, drop_caches)
        unet = os.path.join(mnt, "unet")
        failed |= not _framework_rows(
            row, a, "diffusers", "diffusers from_pretrained, SD1 UNet fp16 %.2f GB"
            % (_st_bytes(unet) / 1e9), unet, drop_caches)
        st = m.stats()
        log("switch mount: fuse_read_bytes %d, gpu_loads %s" % (st.get("fuse_read_bytes", 0),
                                                               st.get("gpu_loads")))
    if failed:
        raise RuntimeError("a load with the switch on differed from the switch off")
