"""A micro-batch's update loss from its per-token values: the policy gradient (on the high-entropy
tokens, when asked), the KL term to the reference and the entropy bonus, with the metrics each logs.

Pure tensor assembly over `evr1.rl`: the rank (`policy.py`) runs the passes that produce the
log-probs and entropies and calls this once per micro-batch before `backward`.
"""

from __future__ import annotations

import torch

from evr1 import rl


def update_loss(o: dict, log_probs: torch.Tensor, entropy: torch.Tensor, adv: torch.Tensor,
                old_lp: torch.Tensor | None, ref_lp: torch.Tensor | None, mask: torch.Tensor,
                counts: dict, agg: str, *, seed: int = 0, bonus_weights: torch.Tensor | None = None,
                bonus: tuple[float, int | None] = (0.0, None)) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(loss, policy-gradient loss, metrics as detached 0-d tensors) of one micro-batch.

    `o`: the rank's options (`actor_group.worker_options`). `counts`: the global token and sequence
    counts every aggregation normalises by, so micro-batches and ranks add up to the exact mean.
    Without old log-probs (a strictly on-policy update) the old log-probs are these, detached: ratio
    1 exactly. `seed` seeds Clip-Cov's draw. `bonus` (coefficient, count): the entropy bonus, over
    every response token with the loss's aggregation, or, with a count, over the tokens
    `bonus_weights` selects (the answer's: `algorithm.entropy_on`): their entropies summed per
    response, the mean over the `count` responses of the mini-batch (on every rank) that have any.
    """
    if old_lp is None:
        old_lp = log_probs.detach()
    pg_mask, pg_counts, ratio = mask, counts, o["top_entropy_ratio"]
    if ratio < 1.0:  # the policy gradient on the high-entropy tokens, weighted as their share
        pg_mask = rl.high_entropy_mask(entropy, mask, ratio)
        pg_counts = {**counts, "global_token_count": counts["global_token_count"] * ratio}
    options = o["loss_options"]
    if o["policy_loss"] == "clip_cov":
        options = {**options, "clip_cov_seed": seed}
    pg_loss, pg_metrics = rl.policy_loss(o["policy_loss"], log_probs, old_lp, adv, pg_mask,
                                         loss_agg_mode=agg, **pg_counts, **options)
    loss = pg_loss
    metrics = {f"actor/{k}": v.detach() for k, v in pg_metrics.items()}
    if o["use_kl_loss"] and ref_lp is not None:
        kl = rl.kl_penalty(log_probs, ref_lp, o["kl_penalty"])
        loss = loss + o["kl_loss_coef"] * rl.aggregate_loss(kl, mask, agg, **counts)
        metrics["actor/kl_loss"] = rl.masked_mean(kl.detach(), mask)
    coeff, bonus_tokens = bonus  # bonus_tokens: the mini-batch's responses with a weighted token
    if bonus_tokens is not None:  # the driver's tokens: each response's sum, a mean over responses
        if coeff != 0.0 and bonus_tokens:
            loss = loss - coeff * (entropy.float() * bonus_weights * mask).sum() / bonus_tokens
    elif coeff != 0.0:
        loss = loss - coeff * rl.aggregate_loss(entropy.float(), mask, agg, **counts)
    metrics["actor/entropy"] = rl.masked_mean(entropy.detach().float(), mask)
    return loss, pg_loss, metrics
