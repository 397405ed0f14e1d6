"""One FSDP2 rank of the actor: the policy (sharded, trained with AdamW) and the frozen reference.

A Ray actor wraps this class (`trainer.py`); every rank receives an equal share of the step's
sequences and runs the same number of forward/backward passes, because FSDP2's all-gathers and
reduce-scatters are collectives that every rank must enter together.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from evr1 import rl
from evr1.models import load_adapter, load_model, response_log_probs

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Shard:
    """This rank's part of a step: prompts, sampled responses and per-token values for each response.

    `advantages`, `old_log_probs` and `ref_log_probs` hold one list per response (its valid tokens);
    the log-probs come back from `log_probs()` and travel with the update so nothing is computed twice.
    """

    prompts: list  # list[PromptInputs]
    responses: list[list[int]]
    advantages: list[list[float]]
    global_token_count: int
    global_sequence_count: int
    old_log_probs: list[list[float]] | None = None
    ref_log_probs: list[list[float]] | None = None


def shard_model(model: torch.nn.Module, mesh) -> None:
    """Shard each language-model block (the classes HF marks as not to be split), then the root.

    The vision tower stays in the root unit on purpose: the model calls it once for images and
    once more for videos, so ranks whose micro-batches mix modalities differently would issue
    different numbers of all-gathers if its blocks were units of their own (a collective
    mismatch). In the root unit it is gathered once per forward, whatever the media.
    """
    block_names = {name for name in (getattr(model, "_no_split_modules", None) or []) if "Vision" not in name}
    for module in model.modules():
        if type(module).__name__ in block_names:
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)


class PolicyWorker:
    def __init__(self, rank: int, world_size: int, master: str, model_dir: str, options: dict):
        self.rank, self.world_size, self.o = rank, world_size, options
        device = options["device"]
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // world_size))
        if device == "cuda":
            torch.cuda.set_device(0)  # Ray assigns one GPU per actor and sets CUDA_VISIBLE_DEVICES.
        dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"tcp://{master}",
                                rank=rank, world_size=world_size)
        mesh = init_device_mesh(device, (world_size,))
        torch.manual_seed(options["seed"])
        dtype = DTYPES[options["dtype"]]
        self.adapter = load_adapter(model_dir)
        self.model = load_model(model_dir, dtype=dtype, attn_implementation=options["attn_implementation"])
        self.model.to(device)
        self.model.train()
        if options.get("gradient_checkpointing"):
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        shard_model(self.model, mesh)
        self.ref = None
        if options["use_kl_loss"] or options["use_kl_in_reward"]:
            self.ref = load_model(model_dir, dtype=dtype, attn_implementation=options["attn_implementation"]).to(device)
            self.ref.requires_grad_(False)
            shard_model(self.ref, mesh)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=options["lr"], betas=tuple(options["betas"]),
                                           weight_decay=options["weight_decay"])
        self.device = device

    # -- helpers -----------------------------------------------------------------------------------

    def _micro_batches(self, shard: Shard):
        """(batch, advantages, old log-probs, ref log-probs) per micro-batch; absent values are None."""
        mbs = self.o["micro_batch_size"]
        for i in range(0, len(shard.responses), mbs):
            batch = self.adapter.collate(shard.prompts[i : i + mbs], shard.responses[i : i + mbs]).to(self.device)
            shape = batch.response_mask.shape
            yield (batch, *(_padded(rows[i : i + mbs], shape, self.device) if rows else None
                            for rows in (shard.advantages, shard.old_log_probs, shard.ref_log_probs)))

    def _log_probs(self, model, batch, with_entropy=False):
        return response_log_probs(model, batch, temperature=self.o["temperature"], with_entropy=with_entropy)

    # -- the step ----------------------------------------------------------------------------------

    def log_probs(self, shard: Shard) -> dict[str, list[list[float]] | None]:
        """Log-probs of each response under the current policy ("old") and the reference, before the update."""
        old, ref = [], []
        with torch.no_grad():
            for batch, *_ in self._micro_batches(shard):
                lengths = batch.response_mask.sum(-1).tolist()
                lp = self._log_probs(self.model, batch)[0].float().cpu()
                old.extend(lp[row, : int(n)].tolist() for row, n in enumerate(lengths))
                if self.ref is not None:
                    rp = self._log_probs(self.ref, batch)[0].float().cpu()
                    ref.extend(rp[row, : int(n)].tolist() for row, n in enumerate(lengths))
        return {"old": old, "ref": ref if self.ref is not None else None}

    def step(self, shard: Shard, lr: float) -> dict[str, float]:
        """`ppo_epochs` passes of policy-gradient updates at `lr`, one optimizer step per pass."""
        self._set_lr(lr)
        micro = list(self._micro_batches(shard))
        agg = self.o["loss_agg_mode"]
        # Global counts make every aggregation mode an exact sum over micro-batches and ranks.
        counts = {"global_token_count": shard.global_token_count, "global_seq_count": shard.global_sequence_count,
                  "loss_scale_factor": self.o["loss_scale_factor"]}
        sums: dict[str, float] = {}
        count = 0
        for _ in range(self.o["ppo_epochs"]):
            self.optimizer.zero_grad(set_to_none=True)
            for batch, adv, old_lp, ref_lp in micro:
                mask = batch.response_mask.float()
                log_probs, entropy = self._log_probs(self.model, batch, with_entropy=True)
                log_probs = log_probs.float()
                pg_loss, pg_metrics = rl.policy_loss(self.o["policy_loss"], log_probs, old_lp, adv, mask,
                                                     loss_agg_mode=agg, **counts, **self.o["loss_options"])
                loss = pg_loss
                metrics = {f"actor/{k}": float(v) for k, v in pg_metrics.items()}
                if self.o["use_kl_loss"] and ref_lp is not None:
                    kl = rl.kl_penalty(log_probs, ref_lp, self.o["kl_penalty"])
                    loss = loss + self.o["kl_loss_coef"] * rl.aggregate_loss(kl, mask, agg, **counts)
                    metrics["actor/kl_loss"] = float(rl.masked_mean(kl.detach(), mask))
                if self.o["entropy_coeff"] != 0.0:
                    loss = loss - self.o["entropy_coeff"] * rl.aggregate_loss(entropy.float(), mask, agg, **counts)
                metrics["actor/entropy"] = float(rl.masked_mean(entropy.detach().float(), mask))
                if not any(k in batch.model_inputs() for k in ("pixel_values", "pixel_values_videos")):
                    loss = loss + 0.0 * self._visual_dummy()
                # The loss is already normalised by global counts; FSDP2 averages gradients over ranks,
                # so multiplying by the world size turns that average into the exact global sum.
                (loss * self.world_size).backward()
                for k, v in metrics.items():
                    sums[k] = sums.get(k, 0.0) + v
                # pg_loss is this micro-batch's share of the global loss: shares add up, they do not average.
                sums["actor/pg_loss"] = sums.get("actor/pg_loss", 0.0) + float(pg_loss.detach()) * len(micro)
                count += 1
            sums["actor/grad_norm"] = sums.get("actor/grad_norm", 0.0) + self._clip_and_step() * len(micro)
        out = {k: v / max(count, 1) for k, v in sums.items()}
        out["actor/pg_loss"] *= self.world_size  # summed over micro-batches here; the driver averages ranks
        out["actor/lr"] = lr
        return out

    def _clip_and_step(self) -> float:
        """Clip the global grad norm; skip the optimizer step when it is not finite (as the reference does)."""
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.o["grad_clip"])
        grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        if torch.isfinite(grad_norm):
            self.optimizer.step()
        return float(grad_norm)

    def sft_step(self, shard: Shard) -> dict[str, float]:
        """One supervised step on given responses (a cold start): token-mean negative log-likelihood."""
        self._set_lr(self.o["warmup_lr"])
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for batch, *_ in self._micro_batches(shard):
            log_probs, _ = response_log_probs(self.model, batch, temperature=1.0)
            nll = rl.aggregate_loss(-log_probs.float(), batch.response_mask, "token-mean",
                                    global_token_count=shard.global_token_count)
            if not any(k in batch.model_inputs() for k in ("pixel_values", "pixel_values_videos")):
                nll = nll + 0.0 * self._visual_dummy()
            (nll * self.world_size).backward()  # see `step`: FSDP2 averages over ranks
            total += float(nll.detach())
        grad_norm = self._clip_and_step()
        return {"warmup/nll": total * self.world_size, "warmup/grad_norm": grad_norm}

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _visual_dummy(self) -> torch.Tensor:
        """A zero-weight pass through the vision tower for a micro-batch without media.

        Keeps every rank's collectives identical when one rank's micro-batch is text-only.
        """
        f = self.adapter.family.factor
        dummy = self.adapter.encode_prompt("<image>", images=[np.zeros((f, f, 3), dtype=np.uint8)]).mm
        out = self.model.model.visual(dummy["pixel_values"].to(self.device), grid_thw=dummy["image_grid_thw"].to(self.device))
        # Every output, deepstack features included, so every vision parameter receives a (zero) gradient.
        return sum(t.sum() for t in _flatten(out) if t.is_floating_point())

    # -- weights and checkpoints (collective: every rank calls these together) ----------------------

    def full_state_dict(self) -> dict | None:
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

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def _padded(rows: list[list[float]], shape, device) -> torch.Tensor:
    """Per-response value lists → a [B, L] float tensor, zero past each response's length."""
    out = torch.zeros(shape, dtype=torch.float32)
    for row, values in enumerate(rows):
        out[row, : len(values)] = torch.tensor(values, dtype=torch.float32)
    return out.to(device)


def _flatten(item):
    """Every tensor inside a (nested) model output: tuples, lists, dicts and HF ModelOutputs."""
    if torch.is_tensor(item):
        yield item
    elif isinstance(item, Mapping):
        for value in item.values():
            yield from _flatten(value)
    elif isinstance(item, (tuple, list)):
        for value in item:
            yield from _flatten(value)
