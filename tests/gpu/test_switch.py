"""The safetensors switch on a real GPU (issue 13): unmodified callers of
safetensors, transformers and diffusers load from mcfs with the switch on
and off, bitwise equal; with it on, the tensor bytes do not go through FUSE
reads (the daemon's fuse_read_bytes grows by the headers only).

Each load runs in a process of its own (the switch patches process-wide);
with the switch on it is turned on by mcfs.patch_safetensors() before or
after the framework is imported (both must work: transformers captures
safe_open at import). Prints the load times of both. Skips with the reason
without a GPU, transformers or diffusers.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from gpuutil import ROOT, need_gpu
from conftest import mcfs_mount
from disk_helpers import drop_page_cache
from test_gpu_load import many_dtypes

PY = sys.executable
# the package from this tree, before what PYTHONPATH already names (carried wheels)
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(
    [os.path.join(ROOT, "gpu", "python")]
    + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
ENV.pop("MCFS_SAFETENSORS", None)
ENV["HF_HUB_OFFLINE"] = "1"  # local models only: never wait on a hub that cannot be reached
HEADER_SLACK = 1 << 20  # FUSE reads allowed with the switch on: headers, config files


def run(code, *args):
    out = subprocess.run([PY, "-c", textwrap.dedent(code), *args], env=ENV, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


SAFETENSORS = """
    import hashlib, json, sys, time, torch
    switch = sys.argv[3]
    if switch == "before":
        import mcfs; mcfs.patch_safetensors()
    import safetensors, safetensors.torch as stt
    if switch == "after":
        import mcfs; mcfs.patch_safetensors()
    import mcfs._switch
    own = mcfs._switch.original_safe_open()
    mnt, src = sys.argv[1], sys.argv[2]
    res = {}

    def h(t):
        return hashlib.sha256(t.contiguous().view(-1).view(torch.uint8).cpu().numpy()
                              .tobytes()).hexdigest() if t.numel() else ""

    with own(src, framework="pt", device="cuda:0") as f:
        want = {k: (str(t.dtype), list(t.shape), h(t)) for k, t in
                ((k, f.get_tensor(k)) for k in f.keys())}
    torch.cuda.synchronize(); t0 = time.perf_counter()
    got = stt.load_file(mnt, device="cuda:0")
    torch.cuda.synchronize(); res["load_file_s"] = time.perf_counter() - t0
    assert {k: (str(v.dtype), list(v.shape), h(v)) for k, v in got.items()} == want
    assert all(v.device == torch.device("cuda:0") for v in got.values())
    ptrs = [v.untyped_storage().data_ptr() for v in got.values() if v.numel()]
    res["own_storages"] = len(set(ptrs)) == len(ptrs)
    with safetensors.safe_open(mnt, framework="pt", device="cuda:0") as f, \\
            own(src, framework="pt", device="cuda:0") as o:
        res["type"] = type(f).__module__ + "." + type(f).__name__
        assert f.keys() == o.keys() and f.metadata() == o.metadata()
        s, so = f.get_slice("big"), o.get_slice("big")
        assert s.get_shape() == so.get_shape() and s.get_dtype() == so.get_dtype()
        for idx in [(slice(10, 20),), (slice(None), slice(5, 300, 7)), (3, slice(None)), ...]:
            assert h(s[idx]) == h(so[idx]) and s[idx].shape == so[idx].shape, idx
        assert h(f.get_tensor("big")) == want["big"][2]
    print(json.dumps(res))
"""


@pytest.mark.parametrize("switch", ["before", "after"])
def test_safetensors_calls_take_the_fast_path(tmp, switch):
    torch = need_gpu()
    from safetensors.torch import save_file
    tensors = many_dtypes(torch)
    src = str(tmp / "src" / "m.safetensors")
    save_file(tensors, src, metadata={"format": "pt"})
    size = os.path.getsize(src)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=256M"]) as m:
        drop_page_cache()  # so that reads through FUSE show in fuse_read_bytes
        s0 = m.stats()["fuse_read_bytes"]
        res, err = run(SAFETENSORS, m.p("m.safetensors"), src, switch)
        read = m.stats()["fuse_read_bytes"] - s0
    assert res["type"] == "mcfs._safeopen.FastSafeOpen", (res, err)
    assert res["own_storages"], "tensors share storage: save_pretrained would drop them"
    assert read < HEADER_SLACK, "%d bytes of a %d-byte file read through FUSE" % (read, size)
    print("load_file through the switch: %.3f s for %d bytes" % (res["load_file_s"], size))


TRANSFORMERS = """
    import hashlib, json, sys, time, torch
    switch, path, device_map = sys.argv[1], sys.argv[2], sys.argv[3]
    if switch == "before":
        import mcfs; mcfs.patch_safetensors()
    import transformers
    from transformers import AutoModelForCausalLM
    if switch == "after":
        import mcfs; mcfs.patch_safetensors()
    torch.cuda.synchronize(); t0 = time.perf_counter()
    dtype = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype":
             torch.bfloat16}
    model = AutoModelForCausalLM.from_pretrained(path, device_map=device_map, **dtype)
    torch.cuda.synchronize(); t = time.perf_counter() - t0
    ids = torch.arange(1, 33, device="cuda:0").view(1, -1)
    with torch.no_grad():
        logits = model(ids).logits.float().cpu()
    sd = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        assert v.device.type == "cuda", (k, v.device)
        sd.update(k.encode()); sd.update(v.contiguous().view(-1).view(torch.uint8).cpu().numpy())
    print(json.dumps({"s": t, "state": sd.hexdigest(), "version": transformers.__version__,
                      "logits": hashlib.sha256(logits.numpy().tobytes()).hexdigest()}))
"""


def expects_fast(version, device_map):
    """Where the switch reaches transformers (see gpu/python/mcfs/_switch.py):
    5.x opens shards on the CPU and the switch hooks the move to the device;
    4.5x opens them with the device's index when device_map names one
    ("cuda:0"; device_map="cuda" has none, so they open on the CPU)."""
    major = int(version.split(".")[0])
    return major >= 5 or device_map == "cuda:0"


@pytest.mark.parametrize("device_map", ["cuda", "cuda:0"])
def test_transformers_from_pretrained(tmp, device_map):
    torch = need_gpu()
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, vocab_size=4096)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(str(tmp / "src" / "llama"),
                                                             max_shard_size="8MB")
    shards = [f for f in os.listdir(str(tmp / "src" / "llama")) if f.endswith(".safetensors")]
    assert len(shards) > 1, shards
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=512M"]) as m:
        path = m.p("llama")
        results, reads = {}, {}
        for switch in ("off", "before", "after", "off"):
            drop_page_cache()  # so that reads through FUSE show in fuse_read_bytes
            s0 = m.stats()["fuse_read_bytes"]
            results[switch], _ = run(TRANSFORMERS, switch, path, device_map)
            reads[switch] = m.stats()["fuse_read_bytes"] - s0
    ref = results["off"]
    for switch in ("before", "after"):
        assert results[switch]["logits"] == ref["logits"], "logits differ with the switch %s" \
            % switch
        assert results[switch]["state"] == ref["state"], "weights differ (switch %s)" % switch
    fast = expects_fast(transformers.__version__, device_map)
    for switch in ("before", "after"):
        if fast:
            assert reads[switch] < HEADER_SLACK, (switch, reads)
    print("transformers %s from_pretrained(device_map=%r): off %.3f s, on %.3f s (%s), FUSE "
          "bytes read with the switch: %d" % (transformers.__version__, device_map, ref["s"],
                                              results["before"]["s"],
                                              "fast path" if fast else "not reached",
                                              reads["before"]))


DIFFUSERS = """
    import hashlib, json, os, sys, time, torch
    switch, src = sys.argv[1], sys.argv[2]
    if switch == "before":
        import mcfs; mcfs.patch_safetensors()
    from diffusers import AutoencoderKL, DDPMPipeline
    if switch == "after":
        import mcfs; mcfs.patch_safetensors()

    def digest(model):
        sd = hashlib.sha256()
        for k, v in sorted(model.state_dict().items()):
            assert v.device == torch.device("cuda:0"), (k, v.device)
            sd.update(k.encode() + str(v.dtype).encode())
            sd.update(v.contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes())
        return sd.hexdigest()

    out = {}
    torch.cuda.synchronize()
    for key, sub, kw in [("one", "vae", {"device_map": "cuda"}),
                         ("f16", "vae", {"device_map": "cuda:0", "torch_dtype": torch.float16}),
                         ("sharded", "vae-sharded", {"device_map": {"": 0}})]:
        t0 = time.perf_counter()
        m = AutoencoderKL.from_pretrained(os.path.join(src, sub), **kw)
        torch.cuda.synchronize(); t = time.perf_counter() - t0
        torch.manual_seed(0)
        x = torch.randn(1, 3, 64, 64, device="cuda:0", dtype=m.dtype)
        with torch.no_grad():
            y = m(x).sample.float().cpu()
        out[key] = {"s": t, "state": digest(m),
                    "out": hashlib.sha256(y.numpy().tobytes()).hexdigest()}
        del m
    t0 = time.perf_counter()
    pipe = DDPMPipeline.from_pretrained(os.path.join(src, "ddpm"), device_map="cuda")
    torch.cuda.synchronize()
    out["pipeline"] = {"s": time.perf_counter() - t0, "state": digest(pipe.unet)}
    print(json.dumps(out))
"""


def test_diffusers_from_pretrained(tmp):
    """diffusers' from_pretrained with a device_map of one GPU: a model of one
    file (also cast to float16), a sharded one and a pipeline load through the
    switch's hooks (gpu/python/mcfs/_switch.py) bitwise equal to the switch
    off, with no tensor bytes read through FUSE."""
    torch = need_gpu()
    diffusers = pytest.importorskip("diffusers", reason="diffusers is not installed")
    pytest.importorskip("accelerate", reason="accelerate is not installed (diffusers' device_map)")
    src = str(tmp / "src")
    made = subprocess.run([PY, "-c", textwrap.dedent("""
        import os, sys, torch
        from diffusers import AutoencoderKL, DDPMPipeline, DDPMScheduler, UNet2DModel
        torch.manual_seed(0)
        with torch.device("cuda"):  # 43 MB of float32: small, yet far above HEADER_SLACK
            vae = AutoencoderKL(block_out_channels=(64, 128, 256), layers_per_block=1,
                                down_block_types=("DownEncoderBlock2D",) * 3,
                                up_block_types=("UpDecoderBlock2D",) * 3)
        vae.save_pretrained(os.path.join(sys.argv[1], "vae"))
        vae.save_pretrained(os.path.join(sys.argv[1], "vae-sharded"), max_shard_size="10MB")
        with torch.device("cuda"):
            unet = UNet2DModel(sample_size=32, block_out_channels=(64, 128), layers_per_block=1,
                               down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                               up_block_types=("AttnUpBlock2D", "UpBlock2D"))
        DDPMPipeline(unet=unet, scheduler=DDPMScheduler()).save_pretrained(
            os.path.join(sys.argv[1], "ddpm"))
    """), src], env=ENV, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr
    shards = [f for f in os.listdir(os.path.join(src, "vae-sharded"))
              if f.endswith(".safetensors")]
    assert len(shards) > 1, shards
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(src) for f in fs
               if f.endswith(".safetensors"))
    with mcfs_mount(src, str(tmp / "mnt"), opts=["ram_cache=512M"]) as m:
        results, reads = {}, {}
        for switch in ("off", "before", "after"):
            drop_page_cache()  # so that reads through FUSE show in fuse_read_bytes
            s0 = m.stats()["fuse_read_bytes"]
            results[switch], _ = run(DIFFUSERS, switch, str(tmp / "mnt"))
            reads[switch] = m.stats()["fuse_read_bytes"] - s0
    ref = results["off"]
    for switch in ("before", "after"):
        for key in ref:
            assert results[switch][key]["state"] == ref[key]["state"], (switch, key)
            assert results[switch][key].get("out") == ref[key].get("out"), (switch, key)
    for switch in ("before", "after"):
        assert reads[switch] < HEADER_SLACK, (switch, reads)
    print("diffusers %s from_pretrained of %d bytes of safetensors; switch off / on (s): "
          % (diffusers.__version__, size) + ", ".join(
              "%s %.3f / %.3f" % (k, ref[k]["s"], results["before"][k]["s"]) for k in ref))
