#!/usr/bin/python3
"""adamw_ref.py — check engine/adamw.c against torch.optim.AdamW.

Runs a few AdamW steps in PyTorch on two parameter tensors (one with weight decay, one without, as
2-D weights and biases/norms are split), with a changing learning rate and gradients from 1e-6 to 10
(so eps matters for some elements), writes inputs and every step's expected param / exp_avg /
exp_avg_sq to a text file, then runs `test_engine adamw FILE`, which repeats the steps with
adamw_update and compares. Usage: adamw_ref.py PATH/TO/test_engine
"""
import os
import subprocess
import sys
import tempfile

import torch

torch.set_num_threads(2)
torch.manual_seed(1)


def fmt(t):
    return " ".join(repr(float(x)) for x in t.flatten().tolist())


def main():
    exe = sys.argv[1]
    n_dec, n_nodec, steps = 37, 11, 7
    # AdamWConfig holds float32 values; give PyTorch exactly those values (as Python floats)
    beta1, beta2, eps, wd = (float(x) for x in torch.tensor([0.9, 0.95, 1e-8, 0.1], dtype=torch.float32))
    p_dec = torch.nn.Parameter(torch.randn(n_dec))
    p_nodec = torch.nn.Parameter(torch.randn(n_nodec))
    opt = torch.optim.AdamW(
        [{"params": [p_dec], "weight_decay": wd}, {"params": [p_nodec], "weight_decay": 0.0}],
        lr=1e-3, betas=(beta1, beta2), eps=eps)
    lines = [f"{n_dec} {n_nodec} {steps}", fmt(torch.tensor([beta1, beta2, eps, wd], dtype=torch.float32)),
             fmt(p_dec.detach()), fmt(p_nodec.detach())]
    for t in range(steps):
        # lr as a float32 value, so both sides use the same number
        lr = float(torch.tensor(3e-3 * (t + 1) / steps if t < 3 else 2e-3 / (t - 1), dtype=torch.float32))
        for g in opt.param_groups:
            g["lr"] = lr
        scales = 10.0 ** torch.randint(-6, 2, (n_dec + n_nodec,)).float()
        grads = torch.randn(n_dec + n_nodec) * scales
        p_dec.grad = grads[:n_dec].clone()
        p_nodec.grad = grads[n_dec:].clone()
        opt.step()
        lines.append(repr(lr))
        lines.append(fmt(p_dec.grad))
        lines.append(fmt(p_nodec.grad))
        for p in (p_dec, p_nodec):
            st = opt.state[p]
            lines += [fmt(p.detach()), fmt(st["exp_avg"]), fmt(st["exp_avg_sq"])]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "adamw.txt")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        r = subprocess.run([exe, "adamw", path])
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
