#!/usr/bin/python3
"""PPO loss and gradients of a CleanRL-style Agent in PyTorch float64 autograd.

Reads a JSON case written by tests/learners/torch_parity.test.cpp (spec, tensors under
troupe's PyTorch names, one minibatch), builds the documented module (docs/learners.md,
docs/checkpoints.md), loads the tensors with load_state_dict(strict=True), computes
CleanRL's PPO loss and prints `loss VALUE` then `grad NAME v0 v1 ...` per parameter.
"""
import json
import sys

import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical
from torch.distributions.normal import Normal


def sequential(obs_dim, hidden, out, activation, batch_norm, eps):
    layers, width = [], obs_dim
    for h in hidden:
        layers.append(nn.Linear(width, h))
        if batch_norm != "none":
            layers.append(nn.BatchNorm1d(h, eps=eps))
        layers.append(nn.Tanh() if activation == "tanh" else nn.ReLU())
        width = h
    layers.append(nn.Linear(width, out))
    return nn.Sequential(*layers)


def main():
    case = json.load(open(sys.argv[1]))
    spec = case["spec"]
    box = spec["action"] == "box"
    args = (spec["obs_dim"], spec["hidden"])
    rest = (spec["activation"], spec["batch_norm"], spec["batch_norm_eps"])
    agent = nn.Module()
    agent.critic = sequential(*args, 1, *rest)
    if box:
        agent.actor_mean = sequential(*args, spec["head_dim"], *rest)
        agent.actor_logstd = nn.Parameter(torch.zeros(1, spec["head_dim"]))
    else:
        agent.actor = sequential(*args, spec["head_dim"], *rest)
    agent = agent.double()
    state = {}
    for name, t in case["tensors"].items():
        state[name] = torch.tensor(t["data"], dtype=torch.float64).reshape(t["shape"])
    for name, value in agent.state_dict().items():
        if name.endswith("num_batches_tracked"):
            state[name] = value
    agent.load_state_dict(state, strict=True)
    # local: per-batch statistics (train mode); global: the running statistics,
    # constants of the step (eval mode for the BatchNorm1d modules).
    agent.train(spec["batch_norm"] != "global")

    b = case["batch"]
    obs = torch.tensor(b["obs"], dtype=torch.float64).reshape(-1, spec["obs_dim"])
    old_logp = torch.tensor(b["old_logprob"], dtype=torch.float64)
    adv = torch.tensor(b["advantages"], dtype=torch.float64)
    ret = torch.tensor(b["returns"], dtype=torch.float64)
    old_v = torch.tensor(b["old_values"], dtype=torch.float64)
    if box:
        mean = agent.actor_mean(obs)
        std = torch.exp(agent.actor_logstd.expand_as(mean))
        dist = Normal(mean, std)
        actions = torch.tensor(b["box_actions"], dtype=torch.float64).reshape(mean.shape)
        logp = dist.log_prob(actions).sum(1)
        entropy = dist.entropy().sum(1)
    else:
        dist = Categorical(logits=agent.actor(obs))
        actions = torch.tensor(b["actions"], dtype=torch.int64)
        logp = dist.log_prob(actions)
        entropy = dist.entropy()
    value = agent.critic(obs).view(-1)

    c = case["config"]
    clip = c["clip_coef"]
    ratio = (logp - old_logp).exp()
    if c["normalize_advantages"]:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
    if c["clip_value_loss"]:
        v_unclipped = (value - ret) ** 2
        v_clipped = old_v + torch.clamp(value - old_v, -clip, clip)
        v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - ret) ** 2).mean()
    else:
        v_loss = 0.5 * ((value - ret) ** 2).mean()
    loss = pg_loss - c["ent_coef"] * entropy.mean() + c["vf_coef"] * v_loss
    loss.backward()
    print(f"loss {loss.item():.17g}")
    for name, p in agent.named_parameters():
        print("grad", name, " ".join(f"{v:.17g}" for v in p.grad.reshape(-1).tolist()))


if __name__ == "__main__":
    main()
