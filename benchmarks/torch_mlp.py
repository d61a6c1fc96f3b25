#!/usr/bin/python3
"""The step that `troupe bench learner` times, in PyTorch: eager, graph, compile.

One PPO update on one minibatch of a CleanRL-style Agent (separate actor and
critic nn.Sequential, tanh, orthogonal init): forward, categorical head,
clipped surrogate + clipped value loss + entropy bonus, backward,
clip_grad_norm_(0.5), Adam(eps=1e-5). Same shapes as troupe's bench: obs 4,
2 actions, hidden [64,64] and [256,256], batch 512 and 4096 (and 65536 on a
GPU).

Three forms (--modes):
  eager    the step as written;
  graph    (CUDA) the whole step captured once as a CUDA graph and replayed,
           Adam with capturable=True: PyTorch's fastest form for small networks;
  compile  the loss under torch.compile (default mode), backward and Adam eager.
The loss is read back (.item()) once every --read-every steps (default 1);
`troupe bench learner`'s whole-update rows read their reports once per 8
minibatches, so compare those with --read-every 8.

Usage: python3 benchmarks/torch_mlp.py [--json] [--device cpu|cuda|all]
       [--modes eager,graph,compile] [--cases 64x4096,256x65536]
       [--seconds S] [--threads N] [--read-every K]
Prints a table, or with --json one JSON array of
{"device", "mode", "hidden", "batch", "samples_per_s"} like `troupe bench
learner --json`. (Debian's python3-torch; the pyenv python3 on PATH may have
no torch.)
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical

OBS_DIM = 4
ACTIONS = 2


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def sequential(hidden, out, out_std):
    layers, width = [], OBS_DIM
    for h in hidden:
        layers += [layer_init(nn.Linear(width, h)), nn.Tanh()]
        width = h
    layers.append(layer_init(nn.Linear(width, out), std=out_std))
    return nn.Sequential(*layers)


class Agent(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.critic = sequential(hidden, 1, 1.0)
        self.actor = sequential(hidden, ACTIONS, 0.01)


def time_case(device, hidden, batch, seconds, mode="eager", read_every=1):
    torch.manual_seed(1)
    agent = Agent(hidden).to(device)
    graph = mode == "graph"
    opt = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5,
                           capturable=graph)
    g = torch.Generator().manual_seed(12345)
    obs = torch.randn(batch, OBS_DIM, generator=g).to(device)
    actions = torch.randint(0, ACTIONS, (batch,), generator=g).to(device)
    old_logp = torch.full((batch,), -0.69).to(device)
    adv = torch.randn(batch, generator=g).to(device)
    ret = torch.randn(batch, generator=g).to(device)
    old_v = torch.randn(batch, generator=g).to(device)
    clip, vf_coef, ent_coef = 0.2, 0.5, 0.01

    def loss_fn():
        logits = agent.actor(obs)
        # No argument validation: it reads a tensor back to the host, which a
        # graph cannot hold (and troupe checks its actions once per batch).
        dist = Categorical(logits=logits, validate_args=False)
        logp = dist.log_prob(actions)
        entropy = dist.entropy()
        value = agent.critic(obs).view(-1)
        ratio = (logp - old_logp).exp()
        a = (adv - adv.mean()) / (adv.std() + 1e-8)
        pg = torch.max(-a * ratio, -a * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
        v_unclipped = (value - ret) ** 2
        v_clipped = old_v + torch.clamp(value - old_v, -clip, clip)
        v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - ret) ** 2).mean()
        return pg - ent_coef * entropy.mean() + vf_coef * v_loss

    compute_loss = torch.compile(loss_fn) if mode == "compile" else loss_fn

    def step(zero_grad=True):
        loss = compute_loss()
        if zero_grad:
            opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
        opt.step()
        return loss

    if graph:
        # Warm up on a side stream, then capture the whole step once; its
        # gradients are allocated inside the graph's pool and overwritten by
        # every replay (PyTorch's "whole network capture").
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        cuda_graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(cuda_graph):
            static_loss = step(zero_grad=False)

        def run():
            cuda_graph.replay()
            return static_loss
    else:
        run = step

    for _ in range(3):
        run().item()
    steps, start = 0, time.perf_counter()
    while True:
        # The loss comes back every read_every steps, as troupe's bench reads
        # its loss reports (every step, or once per whole update).
        for _ in range(read_every - 1):
            run()
        run().item()
        steps += read_every
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and steps >= 5:
            break
    return steps * batch / elapsed


def parse_cases(text):
    cases = []
    for item in text.split(","):
        width, batch = item.split("x")
        cases.append(([int(width), int(width)], int(batch)))
    return cases


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    p.add_argument("--modes", default="eager",
                   help="comma-separated: eager, graph (CUDA only), compile")
    p.add_argument("--cases", default="",
                   help="comma-separated WIDTHxBATCH (hidden [WIDTH,WIDTH]); default: "
                        "64x512,64x4096,256x512,256x4096 and on CUDA 256x65536")
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    p.add_argument("--read-every", type=int, default=1,
                   help="read the loss back once every K steps (default 1)")
    args = p.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in ("eager", "graph", "compile"):
            p.error(f"--modes: unknown mode '{m}' (eager, graph, compile)")
    if args.read_every < 1:
        p.error(f"--read-every must be >= 1, got {args.read_every}")
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = []
    if args.device in ("cpu", "all"):
        devices.append("cpu")
    if args.device in ("cuda", "all") and torch.cuda.is_available():
        devices.append("cuda")
    cases = [([64, 64], 512), ([64, 64], 4096), ([256, 256], 512), ([256, 256], 4096)]
    rows = []
    for device in devices:
        if args.cases:
            device_cases = parse_cases(args.cases)
        else:
            device_cases = cases + ([([256, 256], 65536)] if device == "cuda" else [])
        for mode in modes:
            if mode == "graph" and device != "cuda":
                continue
            for hidden, batch in device_cases:
                sps = time_case(device, hidden, batch, args.seconds, mode, args.read_every)
                rows.append({"device": device, "mode": mode, "hidden": hidden,
                             "batch": batch, "samples_per_s": round(sps, 1)})
    if args.json:
        print(json.dumps(rows))
        return
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
          f"loss read every {args.read_every} steps")
    print(f"{'device':<7} {'mode':<8} {'hidden':<11} {'batch':>7} {'samples/s':>16}")
    for r in rows:
        hidden = "[" + ",".join(map(str, r["hidden"])) + "]"
        print(f"{r['device']:<7} {r['mode']:<8} {hidden:<11} {r['batch']:>7} "
              f"{r['samples_per_s']:>16.0f}")


if __name__ == "__main__":
    main()
