#!/usr/bin/env python3
"""troupe checkpoints in CleanRL's own PPO agents (tests/runtime/policy_interop.test.cpp).

The two ``Agent`` classes are written here as CleanRL defines them
(``cleanrl/ppo_continuous_action.py`` and ``cleanrl/ppo.py``): built from the
environment's space sizes, 64-64 tanh networks, CleanRL's initialization. A
troupe checkpoint's observation-normalizer entries (``obs_rms.*``) are taken
out and applied as Gymnasium's ``NormalizeObservation`` followed by CleanRL's
clip to +-10; every other tensor must load with ``load_state_dict(strict=True)``.

Usage (Debian's python3-torch: run with /usr/bin/python3):

  cleanrl_agents.py CASES.json

CASES.json is a list of objects, each with ``env_id``, ``checkpoint``, ``obs``
(a CSV file as ``troupe policy act`` reads it), ``out`` (a path prefix) and an
optional ``tamper`` (``rename`` or ``drop``). For each case it writes
``OUT.jsonl``, the deterministic outputs in the form ``troupe policy act
--json`` prints, and ``OUT.actions``, one line per row: the argmax of the
logits (discrete) or the mean clipped to Gymnasium's Box bounds (``ClipAction``).
A ``tamper`` case renames or drops one tensor first and writes ``OUT.refused``:
``refused: MESSAGE`` when the strict load refuses it, ``loaded`` otherwise.
"""

import json
import os
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "benchmarks"))
from torch_policy import fmt_number, load_safetensors, read_obs_csv  # noqa: E402

# Gymnasium's spaces of the tasks: observation size, action size (Box) or
# count (Discrete), and the Box's bounds (the actuators' ctrlrange of the v4
# model files). Independent of troupe's registry, which the test compares.
GYMNASIUM_SPACES = {
    "CartPole-v1": {"obs": 4, "discrete": 2},
    "Ant-v4": {"obs": 27, "act": 8, "low": -1.0, "high": 1.0},
    "HalfCheetah-v4": {"obs": 17, "act": 6, "low": -1.0, "high": 1.0},
    "Hopper-v4": {"obs": 11, "act": 3, "low": -1.0, "high": 1.0},
    "Humanoid-v4": {"obs": 376, "act": 17, "low": -0.4, "high": 0.4},
    "InvertedDoublePendulum-v4": {"obs": 11, "act": 1, "low": -1.0, "high": 1.0},
    "InvertedPendulum-v4": {"obs": 4, "act": 1, "low": -3.0, "high": 3.0},
    "Reacher-v4": {"obs": 11, "act": 2, "low": -1.0, "high": 1.0},
    "Swimmer-v4": {"obs": 8, "act": 2, "low": -1.0, "high": 1.0},
    "Walker2d-v4": {"obs": 17, "act": 6, "low": -1.0, "high": 1.0},
}

# Gymnasium's NormalizeObservation epsilon and CleanRL's observation clip.
NORMALIZE_EPSILON = 1e-8
OBS_CLIP = 10.0


# -- CleanRL's agents ------------------------------------------------------------


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    """CleanRL's initialization: orthogonal weights with gain `std`, constant bias."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def tanh_mlp(in_dim, out_dim, out_std):
    """Linear(in, 64) Tanh Linear(64, 64) Tanh Linear(64, out), as CleanRL's PPO."""
    return nn.Sequential(
        layer_init(nn.Linear(in_dim, 64)),
        nn.Tanh(),
        layer_init(nn.Linear(64, 64)),
        nn.Tanh(),
        layer_init(nn.Linear(64, out_dim), std=out_std),
    )


class ContinuousAgent(nn.Module):
    """ppo_continuous_action.Agent: critic, actor_mean and a state-independent actor_logstd."""

    def __init__(self, obs_dim, act_dim):
        super().__init__()
        self.critic = tanh_mlp(obs_dim, 1, 1.0)
        self.actor_mean = tanh_mlp(obs_dim, act_dim, 0.01)
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x):
        return self.critic(x)


class DiscreteAgent(nn.Module):
    """ppo.Agent: critic and actor (the logits of a Categorical)."""

    def __init__(self, obs_dim, n):
        super().__init__()
        self.critic = tanh_mlp(obs_dim, 1, 1.0)
        self.actor = tanh_mlp(obs_dim, n, 0.01)

    def get_value(self, x):
        return self.critic(x)


# -- one case --------------------------------------------------------------------


def split_normalizer(tensors, metadata):
    """Takes the troupe-only entries out; returns (mean, var) or None without obs_norm."""
    stats = {k: tensors.pop(k) for k in list(tensors) if k.startswith("obs_rms.")}
    if metadata.get("obs_norm") != "true":
        if stats:
            raise ValueError(f"obs_norm is not true but the file holds {sorted(stats)}")
        return None
    eps = float(metadata["obs_norm_eps"])
    clip = float(metadata["obs_norm_clip"])
    if eps != NORMALIZE_EPSILON or clip != OBS_CLIP:
        raise ValueError(f"normalizer eps {eps!r} and clip {clip!r} differ from "
                         f"NormalizeObservation's {NORMALIZE_EPSILON!r} and CleanRL's {OBS_CLIP!r}")
    return stats["obs_rms.mean"].numpy(), stats["obs_rms.var"].numpy()


def normalize(obs, stats):
    """NormalizeObservation in float64 numpy, CleanRL's clip, then torch.Tensor (float32)."""
    x = obs.numpy().astype(np.float64)
    if stats is not None:
        mean, var = stats
        x = (x - mean) / np.sqrt(var + NORMALIZE_EPSILON)
        x = np.clip(x, -OBS_CLIP, OBS_CLIP)
    return torch.Tensor(x)


def make_agent(space):
    """The agent CleanRL builds from the environment's spaces."""
    if "discrete" in space:
        return DiscreteAgent(space["obs"], space["discrete"])
    return ContinuousAgent(space["obs"], space["act"])


def tamper(tensors, how):
    """Renames or drops the last Linear of the critic (what a strict load must catch)."""
    name = "critic.4.weight"
    value = tensors.pop(name)
    if how == "rename":
        tensors["critic.5.weight"] = value
    elif how != "drop":
        raise ValueError(f"tamper must be rename or drop, got {how!r}")


def run_case(case):
    space = GYMNASIUM_SPACES[case["env_id"]]
    tensors, metadata = load_safetensors(case["checkpoint"])
    stats = split_normalizer(tensors, metadata)
    agent = make_agent(space)
    if "tamper" in case:
        tamper(tensors, case["tamper"])
        try:
            agent.load_state_dict(tensors, strict=True)
            result = "loaded"
        except RuntimeError as e:
            result = "refused: " + " ".join(str(e).split())
        with open(case["out"] + ".refused", "w") as f:
            f.write(result + "\n")
        return
    agent.load_state_dict(tensors, strict=True)
    agent.eval()

    x = normalize(read_obs_csv(case["obs"]), stats)
    lines, actions = [], []
    with torch.no_grad():
        value = agent.get_value(x).squeeze(-1)
        if "discrete" in space:
            logits = agent.actor(x)
            greedy = torch.argmax(logits, dim=1)
            for r in range(x.shape[0]):
                row = ", ".join(fmt_number(v) for v in logits[r])
                lines.append(f'{{"logits": [{row}], "value": {fmt_number(value[r])}}}')
                actions.append(str(int(greedy[r])))
        else:
            mean = agent.actor_mean(x)
            log_std = agent.actor_logstd.expand_as(mean)
            # ClipAction: np.clip(action, low, high) in the space's float32.
            clipped = np.clip(mean.numpy(), np.float32(space["low"]), np.float32(space["high"]))
            for r in range(x.shape[0]):
                m = ", ".join(fmt_number(v) for v in mean[r])
                s = ", ".join(fmt_number(v) for v in log_std[r])
                lines.append(f'{{"mean": [{m}], "log_std": [{s}], "value": {fmt_number(value[r])}}}')
                actions.append(",".join(fmt_number(v) for v in clipped[r]))
    with open(case["out"] + ".jsonl", "w") as f:
        f.write("".join(line + "\n" for line in lines))
    with open(case["out"] + ".actions", "w") as f:
        f.write("".join(a + "\n" for a in actions))


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: cleanrl_agents.py CASES.json\n")
        return 2
    with open(argv[1]) as f:
        cases = json.load(f)
    for case in cases:
        try:
            run_case(case)
        except Exception as e:
            sys.stderr.write(f"{case['checkpoint']} ({case['env_id']}): {type(e).__name__}: {e}\n")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
