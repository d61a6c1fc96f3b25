#!/usr/bin/env python3
"""The Python client's throughput against the same environments stepped without the protocol.

    troupe bench remote --serve 30 --envs 16 &      # prints the endpoint it serves on
    python3 clients/python/examples/bench.py ENDPOINT [--envs 16] [--seconds 5]

In one run: (1) --envs NumPy CartPoles (examples/cartpole.py) stepped with random actions,
one after another, no protocol; (2) the same environments served to troupe with
``troupe_remote.serve`` (one message per step of all of them, troupe's actions). Prints env
steps per second of each and their ratio (the issue's target: at least 0.5).
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import troupe_remote  # noqa: E402
from cartpole import CartPole  # noqa: E402


def no_protocol(n, seconds, seed):
    """Env steps per second of n CartPoles stepped with random actions."""
    envs = [CartPole() for _ in range(n)]
    rng = np.random.default_rng(seed)
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    steps = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        actions = rng.integers(0, 2, n)
        for i, env in enumerate(envs):
            _o, _r, term, trunc, _ = env.step(int(actions[i]))
            if term or trunc:
                env.reset()
        steps += n
    return steps / (time.perf_counter() - start)


def through_troupe(endpoint, n, seconds, seed):
    """Env steps per second of n CartPoles served to troupe at endpoint."""
    envs = [CartPole() for _ in range(n)]
    clock = {}

    def stop(result):
        if "start" not in clock:  # from the first ACT: the handshake is not timed
            clock["start"], clock["steps"] = time.perf_counter(), result.env_steps
        return time.perf_counter() - clock["start"] >= seconds

    result = troupe_remote.serve(envs, endpoint, client="bench-numpy", seed=seed, stop=stop,
                                 hello_timeout_ms=10000)
    return (result.env_steps - clock["steps"]) / (time.perf_counter() - clock["start"])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("endpoint")
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    bare = no_protocol(args.envs, args.seconds, args.seed)
    served = through_troupe(args.endpoint, args.envs, args.seconds, args.seed)
    print(f"python, {args.envs} NumPy CartPoles: no protocol {bare:,.0f} env steps/s, "
          f"through troupe {served:,.0f} env steps/s, ratio {served / bare:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
