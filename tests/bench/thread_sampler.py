#!/usr/bin/env python3
"""A sampler of a process's threads, for bench_shards.py --profile: every 5 ms, each
thread's name (digits cut), state and, when not running, what it waits in (/proc's
wchan), until SIGTERM (it says "sampling" on stdout once it takes it); then the share of samples in each, most first, into a file.

    thread_sampler.py PID OUT
"""
import collections
import os
import signal
import sys
import threading
import time


def sample_threads(pid, out):
    """Samples the daemon @pid's threads by (name, state, wchan) every 5 ms until SIGTERM,
    then writes the share of samples in each to @out. Runs in a process of its own
    (bench_shards.py --profile runs it), so that it takes no time from the loop's
    interpreter."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("sampling", flush=True)  # the caller's cue: SIGTERM is taken from here on
    counts, n, task, t0 = collections.Counter(), 0, "/proc/%d/task" % pid, time.perf_counter()
    while not stop.is_set():
        try:
            tids = os.listdir(task)
        except OSError:
            break
        for t in tids:
            try:
                with open("%s/%s/comm" % (task, t)) as f:
                    name = f.read().strip().rstrip("0123456789")
                with open("%s/%s/stat" % (task, t)) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                with open("%s/%s/wchan" % (task, t)) as f:
                    wchan = f.read().strip() if state != "R" else "-"
            except (OSError, IndexError):
                continue  # the thread ended
            counts[(name, state, wchan)] += 1
        n += 1
        stop.wait(0.005)
    with open(out, "w") as f:
        f.write("%.3f s, %d samples of the daemon's threads; threads per sample, by name, "
                "state and wchan\n" % (time.perf_counter() - t0, n))
        for (name, state, wchan), c in counts.most_common():
            f.write("%7.2f %-16s %s %s\n" % (c / max(1, n), name, state, wchan))


if __name__ == "__main__":
    sample_threads(int(sys.argv[1]), sys.argv[2])
