"""The policy rank's weights and optimizer as state: checkpoints, the reference, copies for tools and merge.

Collective: every rank of the actor calls these together (FSDP2's state dicts gather and scatter
shards). Mixed into `PolicyWorker`, which provides `model`, `ref`, `optimizer`, `rank`, `device`, `dtype`,
`adapter`, `prep` and its options `o`.
"""

from __future__ import annotations

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

from evr1.train.checkpoint import tensor_digest


class PolicyState:
    """Save, load and copy the policy's (and the frozen reference's) weights; set its optimizer's rate."""

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def probe_logits(self, row: dict, response: list[int]) -> dict | None:
        """Logits of the trained weights on one fixed input, for merge to check its output against.
        Every rank runs the forward (FSDP2 gathers parameters collectively); rank 0 returns them."""
        batch = self.adapter.collate([self.prep.get(row)], [response]).to(self.device, dtype=self.dtype)
        self.prep.release()
        with torch.no_grad():
            logits = self.model(**batch.model_inputs(), use_cache=False).logits.float().cpu()
        digests = self.weight_digests()
        if self.rank:
            return None
        return {"inputs": {k: v.cpu() for k, v in batch.model_inputs().items()}, "logits": logits,
                "weights": digests, "device": str(self.device), "dtype": str(self.dtype).removeprefix("torch."),
                "attn_implementation": self.o.get("attn_implementation")}

    def weight_digests(self) -> dict[str, str] | None:
        """Per tensor of the trained weights, a digest of its fp32 bytes (`tensor_digest`), on rank 0
        (None elsewhere): what the merged model must hold exactly, whatever device computed the
        probe's logits. Collective, one FSDP unit at a time, like a weight sync."""
        from evr1.train.weight_sync import iter_sync_weights

        out = {}
        for name, tensor in iter_sync_weights(self.model, dtype=None, copy=False):
            if self.rank == 0:
                out[name] = tensor_digest(tensor)
        return out if self.rank == 0 else None

    def full_state_dict(self) -> dict | None:
        """The whole policy on rank 0's host (fp32): for tests and tools only, never a step's sync."""
        sd = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return sd if self.rank == 0 else None

    def save(self, path: str) -> None:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)

    def load(self, path: str) -> None:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=path)
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])

    def reset_optimizer(self) -> int:
        """Forget the optimizer's moments and step counts, as if RL had its own optimizer; returns how
        many parameters had state. The warm-up's gradients are clipped at 1 and several times RL's
        (0.2–0.3 on the learning task): kept, their second moments (β₂ = 0.999 forgets them over
        thousands of steps) would shrink every RL step by that factor."""
        had = len(self.optimizer.state)
        self.optimizer.state.clear()
        return had

    def adopt_reference(self) -> None:
        """The reference becomes the current policy: after a format warm-up, KL is measured from the
        weights RL starts from, not from the random or base weights before the warm-up."""
        if self.ref is None:
            return
        with torch.no_grad():
            for ref_param, param in zip(self.ref.parameters(), self.model.parameters()):
                ref_param.copy_(param)

    def save_reference(self, path: str) -> None:
        if self.ref is not None:
            dcp.save({"model": get_model_state_dict(self.ref)}, checkpoint_id=path)

    def load_reference(self, path: str) -> None:
        if self.ref is not None:
            state = {"model": get_model_state_dict(self.ref)}
            dcp.load(state, checkpoint_id=path)
            set_model_state_dict(self.ref, state["model"])
