#!/usr/bin/env python3
"""CartPole-v1 in NumPy, trained by troupe over ZeroMQ.

Start troupe with a config whose env.id is "remote" (config/remote_cartpole.toml), then:

    python3 clients/python/examples/cartpole.py --endpoint tcp://127.0.0.1:5555 --envs 16

The dynamics are Gymnasium's CartPole-v1 (Euler integration, 500-step limit), written
here so the example needs nothing but NumPy and pyzmq.
"""

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import troupe_remote  # noqa: E402


class Box:
    def __init__(self, shape):
        self.shape = shape


class Discrete:
    def __init__(self, n):
        self.n = n


class CartPole:
    """Gymnasium's CartPole-v1: reset(seed) -> (obs, info), step(a) -> (obs, r, term, trunc, info)."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_limit = 12 * 2 * math.pi / 360
    x_limit = 2.4
    max_steps = 500

    def __init__(self):
        self.observation_space = Box((4,))
        self.action_space = Discrete(2)
        self.rng = np.random.default_rng()
        self.state = np.zeros(4)
        self.steps = 0

    def reset(self, seed=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.state = self.rng.uniform(-0.05, 0.05, size=4)
        self.steps = 0
        return self.state.astype(np.float32), {}

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + polemass_length * theta_dot ** 2 * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos ** 2 / total_mass))
        x_acc = temp - polemass_length * theta_acc * cos / total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * x_acc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * theta_acc
        self.state = np.array([x, x_dot, theta, theta_dot])
        self.steps += 1
        terminated = bool(abs(x) > self.x_limit or abs(theta) > self.theta_limit)
        truncated = not terminated and self.steps >= self.max_steps
        return self.state.astype(np.float32), 1.0, terminated, truncated, {}


def read_key(path):
    """The first word of the first non-blank line of a key file."""
    with open(path) as f:
        for line in f:
            if line.strip():
                return line.split()[0]
    raise ValueError(f"{path}: no key")


def curve_keys_of(server_key_file, client_secret_file):
    """(server public, client public, client secret) from troupe remote keygen's files."""
    import zmq
    secret = read_key(client_secret_file)
    return read_key(server_key_file), zmq.curve_public(secret.encode()).decode(), secret


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", default="tcp://127.0.0.1:5555")
    p.add_argument("--envs", type=int, default=16, help="CartPoles in this process")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-env-steps", type=int, default=None)
    p.add_argument("--target", type=float, default=475.0,
                   help="stop once the mean return of the last 100 episodes reaches it")
    p.add_argument("--retries", type=int, default=3, help="new sessions after a failure")
    p.add_argument("--server-key", help="CURVE: file with troupe's public key "
                   "(troupe remote keygen's PATH.pub)")
    p.add_argument("--client-key", help="CURVE: file with this client's secret key "
                   "(troupe remote keygen's PATH; its public key must be on troupe's "
                   "allow-list)")
    args = p.parse_args(argv)
    curve_keys = None
    if args.server_key or args.client_key:
        if not (args.server_key and args.client_key):
            p.error("CURVE needs both --server-key and --client-key")
        curve_keys = curve_keys_of(args.server_key, args.client_key)
    last = [0]

    def stop(result):
        if result.episodes >= last[0] + 100:
            last[0] = result.episodes
            print(f"env_steps {result.env_steps}  episodes {result.episodes}  "
                  f"return_mean_100 {result.mean_return():.1f}  "
                  f"policy_version {result.policy_version}", flush=True)
        return result.episodes >= 100 and result.mean_return() >= args.target

    result = troupe_remote.serve([CartPole() for _ in range(args.envs)], args.endpoint,
                                 client="cartpole-numpy", seed=args.seed,
                                 max_env_steps=args.max_env_steps, stop=stop,
                                 retries=args.retries, curve_keys=curve_keys)
    print(f"done ({result.reason}): env_steps {result.env_steps}  episodes "
          f"{result.episodes}  return_mean_100 {result.mean_return():.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
