#!/usr/bin/python3
"""torch.nn.utils.clip_grad_norm_ then torch.optim.Adam, in float32.

Reads lines from stdin: `params v...`, `config lr beta1 beta2 eps max_norm`, then one
`grad v...` line per step (the learning rate anneals linearly to lr / steps as in
CleanRL). Prints `params v...` after the last step.
"""
import sys

import torch


def main():
    grads = []
    for line in sys.stdin:
        kind, *values = line.split()
        if kind == "params":
            p = torch.nn.Parameter(torch.tensor([float(v) for v in values], dtype=torch.float32))
        elif kind == "config":
            lr, b1, b2, eps, max_norm = (float(v) for v in values)
        elif kind == "grad":
            grads.append(torch.tensor([float(v) for v in values], dtype=torch.float32))
    opt = torch.optim.Adam([p], lr=lr, betas=(b1, b2), eps=eps)
    for step, g in enumerate(grads, start=1):
        opt.param_groups[0]["lr"] = lr * (1.0 - (step - 1.0) / len(grads))
        p.grad = g.clone()
        torch.nn.utils.clip_grad_norm_([p], max_norm)
        opt.step()
    print("params", " ".join(f"{v:.9g}" for v in p.detach().tolist()))


if __name__ == "__main__":
    main()
