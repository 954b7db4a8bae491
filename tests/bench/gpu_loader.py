#!/usr/bin/env python3
"""One loader process of tests/bench/bench_gpu.py: loads a safetensors file
onto the GPU with one library, `--runs` times, and prints one JSON line per
run (start and end on CLOCK_MONOTONIC, bytes, tensors, and with --sums a
checksum per tensor). The libraries are used as their documentation shows:

  mcfs             mcfs.load_file(path, device)                     (the file on a mount;
                   --rank/--world/--split-dim: rank's slices of every tensor)
  h2d              no file: a copy of a pinned 1 GiB host buffer    (the PCIe limit)
  safetensors      safetensors.torch.load_file(path, device)
  instanttensor    instanttensor.safe_open(path, "pt", device).tensors()
  fastsafetensors  SafeTensorsFileLoader(None, device, nogds=True).copy_files_to_device()
  runai            runai_model_streamer.SafetensorsStreamer().stream_file(path, device=...)

A run ends when every tensor is on the device (torch.cuda.synchronize()).
With --barrier DIR, the process prints "ready K" before run K and waits for
DIR/go.K, so that the bench starts several loaders at the same moment (the
concurrent rows); the CUDA context and the library are set up before the
first "ready". With --drop-caches the page cache is dropped before each run
(a file read from disk, not from memory).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "gpu", "python"))

import torch  # noqa: E402
import gpu_rows  # noqa: E402


PLAN = {}  # --rank/--world/--split-dim: a tensor-parallel plan for mcfs
PINNED = []  # the h2d loader's host buffer, made before the first run


def load_mcfs(path, dev, tensors):
    import mcfs
    return mcfs.load_file(path, device=dev, tensors=tensors, **PLAN), None


def load_h2d(path, dev, tensors):
    """Not a file: one copy of a pinned 1 GiB host buffer (the PCIe limit)."""
    return {"h2d": PINNED[0].to(dev, non_blocking=True)}, None


def load_safetensors(path, dev, tensors):
    from safetensors.torch import load_file
    return load_file(path, device=dev), None


def load_instanttensor(path, dev, tensors):
    from instanttensor import safe_open
    with safe_open(path, framework="pt", device=dev) as f:
        return dict(f.tensors()), None


def load_fastsafetensors(path, dev, tensors):
    from fastsafetensors import SafeTensorsFileLoader
    loader = SafeTensorsFileLoader(None, dev, nogds=True)
    loader.add_filenames({0: [path]})
    fb = loader.copy_files_to_device()
    out = {k: fb.get_tensor(k) for k in loader.get_keys()}

    def close():
        fb.close()
        loader.close()
    return out, close


def load_runai(path, dev, tensors):
    from runai_model_streamer import SafetensorsStreamer
    with SafetensorsStreamer() as s:
        s.stream_file(path, device=dev)
        return {k: t for k, t in s.get_tensors()}, None


LOADERS = {"mcfs": load_mcfs, "h2d": load_h2d, "safetensors": load_safetensors,
           "instanttensor": load_instanttensor, "fastsafetensors": load_fastsafetensors,
           "runai": load_runai}


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def sums(out):
    return {k: int(torch.sum(v.reshape(-1).view(torch.uint8), dtype=torch.int64))
            for k, v in out.items() if v.numel()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("loader", choices=sorted(LOADERS))
    ap.add_argument("path")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--barrier", default=None)
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("--sums", action="store_true")
    ap.add_argument("--tensors", nargs="*", default=None)
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--world", type=int, default=None)
    ap.add_argument("--split-dim", type=int, default=None)
    a = ap.parse_args()
    if a.rank is not None:
        PLAN.update(rank=a.rank, world=a.world, split={"*": a.split_dim})
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)  # synchronize() below waits for this device
    torch.empty(1, device=dev)  # the CUDA context, before any timing
    if a.loader == "h2d":
        PINNED.append(torch.ones(1 << 30, dtype=torch.uint8).pin_memory())
    if a.loader == "mcfs":
        import mcfs  # noqa: F401
        from mcfs._cuda import devbuf_from_ptr
        devbuf_from_ptr(torch.empty(1 << 20, dtype=torch.uint8, device=dev).data_ptr())
    fn = LOADERS[a.loader]
    for k in range(a.runs):
        gpu_rows.settle_device()  # the last run's free is not timed with this one
        if a.drop_caches:
            drop_caches()
        if a.barrier:
            print("ready %d" % k, flush=True)
            go = os.path.join(a.barrier, "go.%d" % k)
            while not os.path.exists(go):
                time.sleep(0.0005)
        t0 = time.monotonic()
        out, close = fn(a.path, dev, a.tensors)
        torch.cuda.synchronize()
        t1 = time.monotonic()
        res = {"run": k, "t0": t0, "t1": t1, "tensors": len(out),
               "bytes": sum(v.numel() * v.element_size() for v in out.values())}
        if a.sums and k == 0:
            res["sums"] = sums(out)
        print("result " + json.dumps(res), flush=True)
        del out
        if close:
            close()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
