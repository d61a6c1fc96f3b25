#!/usr/bin/python3
"""The step that `troupe bench learner` times, in PyTorch eager mode.

One PPO update on one minibatch of a CleanRL-style Agent (separate actor and
critic nn.Sequential, tanh, orthogonal init): forward, categorical head,
clipped surrogate + clipped value loss + entropy bonus, backward,
clip_grad_norm_(0.5), Adam(eps=1e-5). Same shapes as troupe's bench: obs 4,
2 actions, hidden [64,64] and [256,256], batch 512 and 4096.

Usage: /usr/bin/python3 benchmarks/torch_mlp.py [--json] [--device cpu|cuda|all]
       [--seconds S] [--threads N]
Prints a table, or with --json one JSON array of
{"device", "hidden", "batch", "samples_per_s"} like `troupe bench learner --json`.
(Debian's python3-torch; the pyenv python3 on PATH may have no torch.)
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


def time_case(device, hidden, batch, seconds):
    torch.manual_seed(1)
    agent = Agent(hidden).to(device)
    opt = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    g = torch.Generator().manual_seed(12345)
    obs = torch.randn(batch, OBS_DIM, generator=g).to(device)
    actions = torch.randint(0, ACTIONS, (batch,), generator=g).to(device)
    old_logp = torch.full((batch,), -0.69).to(device)
    adv = torch.randn(batch, generator=g).to(device)
    ret = torch.randn(batch, generator=g).to(device)
    old_v = torch.randn(batch, generator=g).to(device)
    clip, vf_coef, ent_coef = 0.2, 0.5, 0.01

    def step():
        logits = agent.actor(obs)
        dist = Categorical(logits=logits)
        logp = dist.log_prob(actions)
        entropy = dist.entropy()
        value = agent.critic(obs).view(-1)
        ratio = (logp - old_logp).exp()
        a = (adv - adv.mean()) / (adv.std() + 1e-8)
        pg = torch.max(-a * ratio, -a * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
        v_unclipped = (value - ret) ** 2
        v_clipped = old_v + torch.clamp(value - old_v, -clip, clip)
        v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - ret) ** 2).mean()
        loss = pg - ent_coef * entropy.mean() + vf_coef * v_loss
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
        opt.step()
        return loss

    for _ in range(3):
        step().item()
    steps, start = 0, time.perf_counter()
    while True:
        # .item() copies the loss back, as troupe's bench reads its loss report.
        step().item()
        steps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and steps >= 5:
            break
    return steps * batch / elapsed


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    args = p.parse_args()
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
        device_cases = cases + ([([256, 256], 65536)] if device == "cuda" else [])
        for hidden, batch in device_cases:
            sps = time_case(device, hidden, batch, args.seconds)
            rows.append({"device": device, "hidden": hidden, "batch": batch,
                         "samples_per_s": round(sps, 1)})
    if args.json:
        print(json.dumps(rows))
        return
    print(f"PyTorch {torch.__version__} eager, {torch.get_num_threads()} CPU threads")
    print(f"{'device':<7} {'hidden':<11} {'batch':>7} {'samples/s':>16}")
    for r in rows:
        hidden = "[" + ",".join(map(str, r["hidden"])) + "]"
        print(f"{r['device']:<7} {hidden:<11} {r['batch']:>7} {r['samples_per_s']:>16.0f}")


if __name__ == "__main__":
    main()
