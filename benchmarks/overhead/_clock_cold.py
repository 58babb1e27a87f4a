"""What a clock read costs with cold caches (issue 33: where a Horovod gradient's ~14.6 us in
place go): each read timed alone, hot (back to back) and cold (16 MB written before each, as
the backward kernels do between two gradients), in a process with torch's intra-op threads
started (the process CPU clock sums every thread of the process).

    python benchmarks/overhead/_clock_cold.py [--threads 4] [--reads 2000]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=4, help="torch intra-op threads to start")
    p.add_argument("--reads", type=int, default=2000)
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    x = torch.randn(256, 256)
    (x @ x).sum()  # starts the intra-op threads
    buf = np.zeros(16 * 1024 * 1024 // 8)
    clocks = {"process_time_ns": time.process_time_ns, "thread_time_ns": time.thread_time_ns,
              "perf_counter_ns": time.perf_counter_ns}  # fmt: skip
    print(f"threads in the process: {len(os.listdir('/proc/self/task'))}, "
          f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
    for cold in (False, True):
        for name, read in clocks.items():
            ns = []
            for _ in range(args.reads):
                if cold:
                    np.add(buf, 1.0, out=buf)
                t0 = time.perf_counter_ns()
                read()
                ns.append(time.perf_counter_ns() - t0)
            print(f"{'cold' if cold else 'hot '} {name:<16} median {np.median(ns) / 1e3:.2f} us, "
                  f"90 % {np.percentile(ns, 90) / 1e3:.2f} us")  # fmt: skip


if __name__ == "__main__":
    main()
