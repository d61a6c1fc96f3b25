#!/usr/bin/env python3
"""The PyTorch module that loads troupe policy checkpoints (docs/checkpoints.md).

A CleanRL-style ``Agent``: ``nn.Sequential`` actor and critic (``actor_mean`` and
``actor_logstd`` for Box actions), ``nn.BatchNorm1d`` between Linear and activation
when batch norm is configured, and an ``obs_rms`` module holding the observation
normalizer's statistics. The architecture comes from the file's ``__metadata__``,
the weights from ``load_state_dict`` (strict). Safetensors files are read and
written with the standard library (``json``, ``struct``), no ``safetensors``
package needed.

Usage (Debian's python3-torch: run with /usr/bin/python3):

  torch_policy.py act --checkpoint FILE --obs FILE.csv
      print the deterministic outputs, one JSON object per row, exactly as
      `troupe policy act --json` does
  torch_policy.py write --out FILE --obs-dim 4 --action discrete --action-dim 2
      [--hidden 64,64] [--activation tanh] [--obs-norm] [--batch-norm none]
      [--seed 1] [--obs FILE.csv]
      write a checkpoint from PyTorch (random weights, statistics and batch-norm
      buffers); with --obs also print its outputs for the observations
"""

import argparse
import json
import math
import struct
import sys

import torch
from torch import nn

FORMAT = "troupe.policy"
FORMAT_VERSION = 1

# -- safetensors with the standard library -----------------------------------

_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def save_safetensors(path, tensors, metadata):
    """Writes {name: tensor} and a {str: str} metadata map as safetensors."""
    header = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        # numpy has no bfloat16; the raw bytes of an int16 view are the same.
        view = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
        blob = view.numpy().tobytes()
        header[name] = {
            "dtype": _NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)  # data starts 8-aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def load_safetensors(path):
    """Returns ({name: tensor}, metadata) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    buffer = memoryview(data)[8 + n :]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        raw = bytearray(buffer[begin:end])
        if dtype == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
        elif len(raw) == 0:
            t = torch.empty(0, dtype=dtype)
        else:
            t = torch.frombuffer(raw, dtype=dtype)
        tensors[name] = t.reshape(info["shape"]).clone()
    return tensors, metadata


# -- the module ----------------------------------------------------------------


class RunningMeanStd(nn.Module):
    """The observation normalizer's statistics, as float64 buffers."""

    def __init__(self, dim):
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(0.0, dtype=torch.float64))


def make_network(in_dim, hidden, out_dim, activation, batch_norm, bn_eps, bn_momentum):
    """Linear, [BatchNorm1d], activation per hidden layer, then the output Linear."""
    act = {"tanh": nn.Tanh, "relu": nn.ReLU}[activation]
    layers = []
    for width in hidden:
        layers.append(nn.Linear(in_dim, width))
        if batch_norm != "none":
            layers.append(nn.BatchNorm1d(width, eps=bn_eps, momentum=bn_momentum))
        layers.append(act())
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class Agent(nn.Module):
    """CleanRL-style actor-critic built from a checkpoint's __metadata__."""

    def __init__(self, metadata):
        super().__init__()
        if metadata.get("format") != FORMAT:
            found = metadata.get("format")
            raise ValueError(f"metadata format must be {FORMAT!r}, got {found!r}")
        if int(metadata["format_version"]) != FORMAT_VERSION:
            version = metadata["format_version"]
            raise ValueError(f"format_version {version} is not supported")
        self.obs_dim = int(metadata["obs_dim"])
        self.discrete = metadata["action_space"] == "discrete"
        self.action_dim = int(metadata["action_dim"])
        hidden = [int(h) for h in json.loads(metadata["hidden"])]
        activation = metadata["activation"]
        self.obs_norm = metadata["obs_norm"] == "true"
        self.obs_norm_eps = float(metadata["obs_norm_eps"])
        self.obs_norm_clip = float(metadata["obs_norm_clip"])
        bn = metadata["batch_norm"]
        bn_eps = float(metadata["batch_norm_eps"])
        bn_momentum = float(metadata["batch_norm_momentum"])

        def network(out_dim):
            return make_network(self.obs_dim, hidden, out_dim, activation, bn, bn_eps,
                                bn_momentum)

        self.critic = network(1)
        if self.discrete:
            self.actor = network(self.action_dim)
        else:
            self.actor_mean = network(self.action_dim)
            self.actor_logstd = nn.Parameter(torch.zeros(1, self.action_dim))
        if self.obs_norm:
            self.obs_rms = RunningMeanStd(self.obs_dim)

    def normalize(self, obs):
        """clip((x - mean) / sqrt(var + eps), -clip, clip) in float64, then float32."""
        x = obs.to(torch.float64)
        if self.obs_norm:
            x = (x - self.obs_rms.mean) / torch.sqrt(self.obs_rms.var + self.obs_norm_eps)
            x = torch.clamp(x, -self.obs_norm_clip, self.obs_norm_clip)
        return x.to(torch.float32)

    def forward(self, obs):
        """Deterministic outputs: logits or (mean, log_std), and the value."""
        x = self.normalize(obs)
        out = {"value": self.critic(x).squeeze(-1)}
        if self.discrete:
            out["logits"] = self.actor(x)
        else:
            out["mean"] = self.actor_mean(x)
            out["log_std"] = self.actor_logstd.expand_as(out["mean"])
        return out


def load_agent(path):
    """An Agent in eval mode with every tensor of the checkpoint loaded (strict)."""
    tensors, metadata = load_safetensors(path)
    agent = Agent(metadata)
    agent.load_state_dict(tensors, strict=True)
    agent.eval()
    return agent


def save_agent(path, agent, metadata):
    """Writes the agent's state_dict with the given metadata."""
    save_safetensors(path, agent.state_dict(), metadata)


# -- observations and output -------------------------------------------------


def read_obs_csv(path):
    """Rows of floats; a first line that is not all numbers is a header."""
    rows = []
    with open(path) as f:
        lines = [line.strip() for line in f]
    first = True
    for line in lines:
        if not line:
            continue
        fields = [x.strip() for x in line.split(",")]
        try:
            rows.append([float(x) for x in fields])
        except ValueError:
            if first:
                first = False
                continue
            raise
        first = False
    return torch.tensor(rows, dtype=torch.float32)


def fmt_number(x):
    x = float(x)
    return format(x, ".9g") if math.isfinite(x) else "null"


def print_outputs(agent, obs):
    with torch.no_grad():
        out = agent(obs)
    lines = []
    for r in range(obs.shape[0]):
        value = fmt_number(out["value"][r])
        if agent.discrete:
            logits = ", ".join(fmt_number(v) for v in out["logits"][r])
            lines.append(f'{{"logits": [{logits}], "value": {value}}}')
        else:
            mean = ", ".join(fmt_number(v) for v in out["mean"][r])
            log_std = ", ".join(fmt_number(v) for v in out["log_std"][r])
            lines.append(f'{{"mean": [{mean}], "log_std": [{log_std}], "value": {value}}}')
    sys.stdout.write("".join(line + "\n" for line in lines))


# -- commands ------------------------------------------------------------------


def cmd_act(args):
    agent = load_agent(args.checkpoint)
    print_outputs(agent, read_obs_csv(args.obs))


def cmd_write(args):
    torch.manual_seed(args.seed)
    hidden = [int(h) for h in args.hidden.split(",") if h]
    metadata = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "obs_dim": str(args.obs_dim),
        "action_space": args.action,
        "action_dim": str(args.action_dim),
        "hidden": json.dumps(hidden),
        "activation": args.activation,
        "obs_norm": "true" if args.obs_norm else "false",
        "obs_norm_eps": repr(1e-8),
        "obs_norm_clip": repr(10.0),
        "batch_norm": args.batch_norm,
        "batch_norm_eps": repr(1e-5),
        "batch_norm_momentum": repr(0.1),
        "producer": f"torch {torch.__version__}",
    }
    agent = Agent(metadata)
    # Random values everywhere, so that no initialization hides a mix-up.
    with torch.no_grad():
        for name, t in agent.state_dict().items():
            if name.endswith("num_batches_tracked"):
                t.fill_(int(torch.randint(0, 1000, ())))
            elif name.endswith("var"):
                t.uniform_(0.3, 3.0)
            elif name == "obs_rms.count":
                t.fill_(12345.0)
            elif t.dim() == 2 and name.endswith("weight"):
                t.normal_(0.0, 1.5 / math.sqrt(t.shape[1]))
            else:
                t.normal_(0.0, 1.0)
    save_agent(args.out, agent, metadata)
    if args.obs:
        agent.eval()
        print_outputs(agent, read_obs_csv(args.obs))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    act = sub.add_parser("act", help="print a checkpoint's outputs for observations")
    act.add_argument("--checkpoint", required=True)
    act.add_argument("--obs", required=True)
    act.set_defaults(run=cmd_act)
    write = sub.add_parser("write", help="write a checkpoint from PyTorch")
    write.add_argument("--out", required=True)
    write.add_argument("--obs-dim", type=int, required=True)
    write.add_argument("--action", choices=["discrete", "box"], required=True)
    write.add_argument("--action-dim", type=int, required=True)
    write.add_argument("--hidden", default="64,64")
    write.add_argument("--activation", choices=["tanh", "relu"], default="tanh")
    write.add_argument("--obs-norm", action="store_true")
    write.add_argument("--batch-norm", choices=["none", "global", "local"], default="none")
    write.add_argument("--seed", type=int, default=1)
    write.add_argument("--obs")
    write.set_defaults(run=cmd_write)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
