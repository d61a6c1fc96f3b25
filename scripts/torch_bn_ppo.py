#!/usr/bin/python3
"""PPO with batch norm in PyTorch, one process: the control for troupe's batch-norm modes.

    /usr/bin/python3 scripts/torch_bn_ppo.py --bn local --ratio same --seed 1
    /usr/bin/python3 scripts/torch_bn_ppo.py --bn ema --momentum 0.9 --seed 1

CartPole-v1 (Gymnasium's dynamics, vectorized in NumPy here), PPO with CleanRL's defaults
(4 environments, 128 steps, 4 minibatches, 4 epochs, learning rate 2.5e-4 annealed, clipping
0.2, entropy 0.01, value 0.5, gradient norm 0.5), separate actor and critic MLPs [64, 64]
with tanh, and a batch-norm layer after each hidden Linear:

  --bn none        no batch norm
  --bn local       torch.nn.BatchNorm1d: batch statistics when learning (train mode), running
                   statistics (momentum 0.1) when acting (eval mode); --ratio act takes the
                   ratio's old log-probabilities from acting, --ratio same recomputes them per
                   minibatch with the batch's starting weights in train mode
  --bn ema         running statistics used in every forward pass (no gradient through them),
                   moved toward each minibatch's moments after its forward pass:
                   running = m * running + (1 - m) * minibatch, m = --momentum
  --bn cumulative  the same, with the exact count-weighted mean and variance of every row any
                   minibatch has seen (troupe's default "cumulative" keeper streams)

--scale-spread S multiplies the observations of the second half of the environments by S
(troupe's env.obs_scale_spread). Prints one JSON line: the env steps at which the 100-episode
mean return first reached 300 and 475 (null: never) and the final 100-episode mean.
Needs python3-torch and python3-numpy (Debian packages).
"""
import argparse
import copy
import json
import math
import time

import numpy as np
import torch
from torch import nn


class VecCartPole:
    """N CartPole-v1 environments; a finished one is reset at once (its next observation is
    the new episode's first, as Gymnasium 0.29's vector environments do)."""

    def __init__(self, n, seed):
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.state = self.rng.uniform(-0.05, 0.05, size=(n, 4))
        self.steps = np.zeros(n, dtype=np.int64)
        self.ret = np.zeros(n)

    def step(self, action):
        g, mc, mp, length, fmag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
        x, x_dot, th, th_dot = self.state.T
        force = np.where(action == 1, fmag, -fmag)
        total = mp + mc
        pml = mp * length
        cos, sin = np.cos(th), np.sin(th)
        temp = (force + pml * th_dot ** 2 * sin) / total
        th_acc = (g * sin - cos * temp) / (length * (4.0 / 3.0 - mp * cos ** 2 / total))
        x_acc = temp - pml * th_acc * cos / total
        x = x + tau * x_dot
        x_dot = x_dot + tau * x_acc
        th = th + tau * th_dot
        th_dot = th_dot + tau * th_acc
        self.state = np.stack([x, x_dot, th, th_dot], axis=1)
        self.steps += 1
        self.ret += 1.0
        term = (np.abs(x) > 2.4) | (np.abs(th) > 12 * 2 * math.pi / 360)
        trunc = ~term & (self.steps >= 500)
        done = term | trunc
        finished = self.ret[done].tolist()
        if done.any():
            k = int(done.sum())
            self.state[done] = self.rng.uniform(-0.05, 0.05, size=(k, 4))
            self.steps[done] = 0
            self.ret[done] = 0.0
        return self.state.astype(np.float32), done, finished


class RunningNorm(nn.Module):
    """Normalizes with running statistics (no gradient through them) that follow the
    minibatches' moments: an exponential average (ema) or the exact cumulative moments."""

    def __init__(self, width, mode, momentum, eps=1e-5):
        super().__init__()
        self.mode, self.momentum, self.eps = mode, momentum, eps
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))
        self.register_buffer("mean", torch.zeros(width, dtype=torch.float64))
        self.register_buffer("var", torch.ones(width, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, z):
        out = (z - self.mean.float()) / torch.sqrt(self.var.float() + self.eps)
        if self.training:
            # The minibatch's moments move the statistics after this pass (troupe's learner
            # reads the statistics, computes, then sends the moments to the keeper).
            with torch.no_grad():
                zd = z.detach().double()
                n = float(zd.shape[0])
                bm, bv = zd.mean(0), zd.var(0, unbiased=False)
                if self.mode == "ema":
                    if self.count == 0:
                        self.mean.copy_(bm)
                        self.var.copy_(bv)
                    else:
                        m = self.momentum
                        self.mean.mul_(m).add_((1 - m) * bm)
                        self.var.mul_(m).add_((1 - m) * bv)
                else:  # cumulative: Chan et al.'s parallel merge
                    c = self.count
                    total = c + n
                    delta = bm - self.mean
                    m2 = self.var * c + bv * n + delta ** 2 * c * n / total
                    self.mean.add_(delta * n / total)
                    self.var.copy_(m2 / total)
                self.count.add_(n)
        return out * self.weight + self.bias


def mlp(out_dim, out_gain, bn, momentum):
    layers, width, prev = [], 64, 4
    for _ in range(2):
        lin = nn.Linear(prev, width)
        nn.init.orthogonal_(lin.weight, math.sqrt(2))
        nn.init.zeros_(lin.bias)
        layers.append(lin)
        if bn == "local":
            layers.append(nn.BatchNorm1d(width, momentum=0.1))
        elif bn in ("ema", "cumulative"):
            layers.append(RunningNorm(width, bn, momentum))
        layers.append(nn.Tanh())
        prev = width
    head = nn.Linear(prev, out_dim)
    nn.init.orthogonal_(head.weight, out_gain)
    nn.init.zeros_(head.bias)
    layers.append(head)
    return nn.Sequential(*layers)


class Agent(nn.Module):
    def __init__(self, bn, momentum):
        super().__init__()
        self.actor = mlp(2, 0.01, bn, momentum)
        self.critic = mlp(1, 1.0, bn, momentum)

    def dist_value(self, x):
        return torch.distributions.Categorical(logits=self.actor(x)), self.critic(x).squeeze(-1)


def train(args):
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    n, steps, mbs, epochs = 4, 128, 4, 4
    batch = n * steps
    env = VecCartPole(n, args.seed)
    scale = np.ones((n, 1), dtype=np.float32)
    scale[n // 2:] = args.scale_spread
    agent = Agent(args.bn, args.momentum)
    opt = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    obs_buf = torch.zeros((steps, n, 4))
    act_buf = torch.zeros((steps, n), dtype=torch.long)
    logp_buf = torch.zeros((steps, n))
    rew_buf = torch.zeros((steps, n))
    done_buf = torch.zeros((steps, n))
    val_buf = torch.zeros((steps, n))
    next_obs = torch.tensor(env.state.astype(np.float32) * scale)
    next_done = torch.zeros(n)
    returns, reached, global_step = [], {300: None, 475: None}, 0
    updates = args.total_steps // batch
    start = time.time()
    for update in range(updates):
        for g in opt.param_groups:
            g["lr"] = 2.5e-4 * (1.0 - update / updates)
        agent.eval()  # acting: running statistics
        for t in range(steps):
            global_step += n
            obs_buf[t], done_buf[t] = next_obs, next_done
            with torch.no_grad():
                dist, value = agent.dist_value(next_obs)
                action = dist.sample()
            act_buf[t], logp_buf[t], val_buf[t] = action, dist.log_prob(action), value
            o, d, finished = env.step(action.numpy())
            rew_buf[t] = 1.0
            next_obs, next_done = torch.tensor(o * scale), torch.tensor(d, dtype=torch.float32)
            for r in finished:
                returns.append(r)
                mean = float(np.mean(returns[-100:]))
                for th in reached:
                    if reached[th] is None and len(returns) >= 1 and mean >= th:
                        reached[th] = global_step
        with torch.no_grad():
            _, next_value = agent.dist_value(next_obs)
            adv = torch.zeros((steps, n))
            last = 0
            for t in reversed(range(steps)):
                nonterm = 1.0 - (next_done if t == steps - 1 else done_buf[t + 1])
                nv = next_value if t == steps - 1 else val_buf[t + 1]
                delta = rew_buf[t] + 0.99 * nv * nonterm - val_buf[t]
                last = delta + 0.99 * 0.95 * nonterm * last
                adv[t] = last
            ret = adv + val_buf
        b_obs, b_act, b_logp = obs_buf.reshape(-1, 4), act_buf.reshape(-1), logp_buf.reshape(-1)
        b_adv, b_ret, b_val = adv.reshape(-1), ret.reshape(-1), val_buf.reshape(-1)
        old = copy.deepcopy(agent) if args.bn == "local" and args.ratio == "same" else None
        agent.train()
        for _ in range(epochs):
            idx = np.random.permutation(batch)
            for m in range(mbs):
                mb = idx[m * batch // mbs:(m + 1) * batch // mbs]
                dist, newv = agent.dist_value(b_obs[mb])
                newlogp, entropy = dist.log_prob(b_act[mb]), dist.entropy()
                oldlogp, oldv = b_logp[mb], b_val[mb]
                if old is not None:
                    # The same minibatch through the batch's starting weights, normalized as
                    # the learning pass normalizes it (train mode: its own statistics).
                    old.train()
                    with torch.no_grad():
                        od, ov = old.dist_value(b_obs[mb])
                        oldlogp, oldv = od.log_prob(b_act[mb]), ov
                ratio = (newlogp - oldlogp).exp()
                a = b_adv[mb]
                a = (a - a.mean()) / (a.std() + 1e-8)
                pg = torch.max(-a * ratio, -a * ratio.clamp(0.8, 1.2)).mean()
                vclip = oldv + (newv - oldv).clamp(-0.2, 0.2)
                vloss = 0.5 * torch.max((newv - b_ret[mb]) ** 2, (vclip - b_ret[mb]) ** 2).mean()
                loss = pg - 0.01 * entropy.mean() + 0.5 * vloss
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                opt.step()
    final = float(np.mean(returns[-100:])) if returns else float("nan")
    return {"bn": args.bn, "ratio": args.ratio, "momentum": args.momentum,
            "scale_spread": args.scale_spread, "seed": args.seed,
            "steps_to_300": reached[300], "steps_to_475": reached[475],
            "final_mean_100": round(final, 1), "wall_s": round(time.time() - start, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bn", choices=["none", "local", "ema", "cumulative"], default="none")
    ap.add_argument("--ratio", choices=["act", "same"], default="act")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--scale-spread", type=float, default=1.0)
    ap.add_argument("--total-steps", type=int, default=400000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(json.dumps(train(args)), flush=True)


if __name__ == "__main__":
    main()
