"""Entropy of the next-token distribution from logits, and the high-entropy tokens a loss may keep."""

from __future__ import annotations

import torch

__all__ = ["AdaptiveEntropyCoefficient", "entropy_from_logits", "high_entropy_mask"]


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy ``H = −Σ_v p_v log p_v`` over the last dimension, ``[..., V] → [...]``.

    Computed from ``log_softmax`` (stable for large logits). Vocabulary entries masked with
    ``−inf`` contribute 0 to the value and to the gradient (a naive ``p · log p`` would give
    ``0 · −inf = nan``). Half-precision logits are upcast to float32 for the reduction; the
    result comes back in the input dtype. Pass temperature-scaled logits to get the entropy of the
    sampling distribution.
    """
    if logits.dim() == 0:
        raise ValueError("logits must have a vocabulary dimension, got a 0-d tensor")
    compute_dtype = torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else logits.dtype
    log_p = torch.log_softmax(logits.to(compute_dtype), dim=-1)
    # Zero the log-prob where p = 0 *before* multiplying, so neither value nor gradient sees −inf.
    safe_log_p = torch.where(torch.isneginf(log_p), torch.zeros_like(log_p), log_p)
    entropy = -(log_p.exp() * safe_log_p).sum(dim=-1)
    return entropy.to(logits.dtype)


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, ratio: float) -> torch.Tensor:
    """The valid tokens among the top ``ratio`` by entropy, as a float mask like ``mask`` ``[B, L]``.

    Wang et al. 2025 ("Beyond the 80/20 rule"): the policy gradient restricted to the highest-entropy
    fifth of the response tokens (the forks where the policy decides) learns as well or better than on
    every token. The threshold is the ``1 − ratio`` quantile of the valid tokens' entropies; ties at the
    threshold are kept. ``ratio`` ≥ 1 keeps every valid token; an empty mask stays empty.
    """
    if not 0.0 < ratio:
        raise ValueError(f"top_entropy_ratio must be in (0, 1], got {ratio}")
    valid = mask.bool()
    if ratio >= 1.0:
        return valid.float()
    # The quantile of the valid entries, padding as NaN (ignored): no boolean indexing, whose output
    # size the host must read, so a GPU trainer does not wait for the device here. An empty mask gives
    # a NaN threshold, which no entry reaches: the mask stays empty.
    values = entropy.detach().float()
    threshold = torch.nanquantile(torch.where(valid, values, torch.full_like(values, float("nan"))).flatten(),
                                  1.0 - ratio)
    return (valid & (values >= threshold)).float()


class AdaptiveEntropyCoefficient:
    """An entropy bonus whose coefficient holds a measured entropy near a target (after Skywork-OR1's
    adaptive entropy control, He et al. 2025).

    After each step, with ``e`` the entropy measured on the tokens the bonus covers:
    ``c ← clip(c + Δ, 0, c_max)`` when ``e < target``, else ``c ← clip(c − Δ, 0, c_max)``. The
    coefficient a step uses (``value``) is ``c`` while the last measured entropy is below the target,
    and 0 once it is at or above it: the bonus only pushes a policy up towards the target, never
    past it, and a fixed coefficient's two failures (no effect when too small, an entropy blow-up when
    too large, docs/learning.md finding 7) become a rate, Δ, at which it reacts.

    The state is two floats (`state()` / `from_state`), saved with each checkpoint so a resumed run
    continues with the same coefficient.
    """

    def __init__(self, target: float, delta: float, max_coeff: float, coeff: float = 0.0,
                 last_entropy: float | None = None) -> None:
        if not target > 0:
            raise ValueError(f"entropy target must be > 0, got {target!r}")
        if not delta > 0:
            raise ValueError(f"entropy coefficient delta must be > 0, got {delta!r}")
        if not max_coeff >= 0:
            raise ValueError(f"entropy coefficient max must be >= 0, got {max_coeff!r}")
        if not 0 <= coeff <= max_coeff:
            raise ValueError(f"entropy coefficient {coeff!r} must lie in [0, {max_coeff}]")
        self.target, self.delta, self.max_coeff = float(target), float(delta), float(max_coeff)
        self.coeff = float(coeff)
        self.last_entropy = None if last_entropy is None else float(last_entropy)

    @property
    def value(self) -> float:
        """The coefficient the next step's loss uses: 0 while the policy is at or above the target
        (or before any measurement, when the coefficient is still its start value)."""
        if self.last_entropy is not None and self.last_entropy >= self.target:
            return 0.0
        return self.coeff

    def update(self, entropy: float | None) -> None:
        """Adapt to the entropy the last step measured; None (no token to measure: a skipped step or no
        answer anywhere) leaves everything as it was."""
        if entropy is None:
            return
        if not entropy == entropy:  # NaN: refuse rather than freeze the controller on a bad value
            raise ValueError("the measured entropy is NaN")
        step = self.delta if entropy < self.target else -self.delta
        self.coeff = min(max(self.coeff + step, 0.0), self.max_coeff)
        self.last_entropy = float(entropy)

    def state(self) -> dict[str, float | None]:
        return {"coeff": self.coeff, "last_entropy": self.last_entropy}

    @classmethod
    def from_state(cls, target: float, delta: float, max_coeff: float,
                   state: dict | None, start: float = 0.0) -> "AdaptiveEntropyCoefficient":
        """A controller from a checkpoint's `state()` (None: a fresh one at `start`)."""
        if state is None:
            return cls(target, delta, max_coeff, coeff=start)
        return cls(target, delta, max_coeff, coeff=state["coeff"], last_entropy=state["last_entropy"])
