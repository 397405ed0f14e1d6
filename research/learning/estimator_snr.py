"""Signal and noise of one group's policy gradient under each advantage estimator, on a k-way answer.

    .venv/bin/python -m research.learning.estimator_snr                 # the table in docs/learning.md
    .venv/bin/python -m research.learning.estimator_snr --groups 20000  # more draws

One prompt, a softmax policy over k answers (one right), a group of n samples scored 1 (right) or 0.
Each sample y_i with advantage A_i adds A_i·(e_{y_i} − π) to the gradient on the logits (ascent on
A·log π). The estimators are evr1's own (`evr1.rl.compute_advantages`). Over many groups drawn from
π, this prints, per estimator and policy:

- `signal`: the mean gradient's component towards the right answer, (E g)_right;
- `noise`: the root of the summed variance of g's components, sqrt(E|g − E g|²);
- `snr`: signal / noise, the share of one group's update that points somewhere useful;
- `zero`: the share of groups whose gradient is exactly 0 (GRPO: all n rewards equal).

For any baseline b that does not depend on the sample, E[(R − b)·∇log π] = E[R·∇log π]: a baseline
moves the noise, not the direction of the mean. W-REINFORCE's advantage λR − (1 − R) = (1 + λ)R − 1
is REINFORCE scaled by 1 + λ with the constant baseline 1 in expectation; Dr. GRPO's group mean is a
baseline that tracks the group. Seconds on one core; no model.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from evr1 import rl

# (name, estimator, options) compared; Dr. GRPO is conf/learning.yaml's (`std: none`).
ESTIMATORS = (("dr_grpo", "grpo", {"std": "none"}), ("grpo", "grpo", {"std": "sample"}),
              ("w_reinforce", "w_reinforce", {"positive_weight": 0.1}), ("reinforce", "w_reinforce",
                                                                          {"positive_weight": 1.0}))


def policies(k: int) -> dict[str, np.ndarray]:
    """Named policies over k answers, the right one first: undecided, leaning right, sure and wrong."""
    uniform = np.full(k, 1.0 / k)
    leaning = np.full(k, 0.4 / (k - 1))
    leaning[0] = 0.6
    wrong = np.full(k, 0.1 / (k - 1))
    wrong[1] = 0.9
    wrong_sure = np.full(k, 0.02 / (k - 1))
    wrong_sure[1] = 0.98
    return {"uniform": uniform, "right 0.6": leaning, "wrong 0.9 (right 0.03)": wrong,
            "wrong 0.98 (right 0.007)": wrong_sure}


def group_gradients(pi: np.ndarray, n: int, groups: int, estimator: str, options: dict,
                    rng: np.random.Generator) -> np.ndarray:
    """`groups` draws of one group's gradient on the logits, [groups, k]; answer 0 is the right one."""
    k = len(pi)
    answers = rng.choice(k, size=(groups, n), p=pi)
    rewards = (answers == 0).astype(np.float32).reshape(-1)
    index = np.repeat(np.arange(groups), n)
    mask = torch.ones(groups * n, 1)
    adv, _ = rl.compute_advantages(estimator, torch.from_numpy(rewards), index, mask, **options)
    adv = adv[:, 0].numpy().reshape(groups, n)
    onehot = np.eye(k)[answers]  # [groups, n, k]
    return (adv[..., None] * (onehot - pi)).sum(axis=1)


def table(k: int, n: int, groups: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for policy, pi in policies(k).items():
        for name, estimator, options in ESTIMATORS:
            g = group_gradients(pi, n, groups, estimator, options, rng)
            mean = g.mean(axis=0)
            noise = float(np.sqrt(((g - mean) ** 2).sum(axis=1).mean()))
            rows.append({"policy": policy, "estimator": name, "signal": round(float(mean[0]), 4),
                         "noise": round(noise, 4), "snr": round(float(mean[0]) / noise, 4) if noise else None,
                         "zero": round(float((np.abs(g).max(axis=1) == 0).mean()), 3)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=4, help="answers (colour, flash_time: 4)")
    ap.add_argument("--n", type=int, default=8, help="samples a group (rollout.n)")
    ap.add_argument("--groups", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for row in table(args.k, args.n, args.groups, args.seed):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
