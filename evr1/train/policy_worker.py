"""One FSDP2 rank of the actor: the policy (sharded, trained with AdamW) and the frozen reference.

A Ray actor wraps this class (`trainer.py`); every rank receives an equal share of the step's
sequences and runs the same number of forward/backward passes, because FSDP2's all-gathers and
reduce-scatters are collectives that every rank must enter together.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
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
    # Responses per optimizer step on this rank, and each mini-batch's (tokens, sequences) summed
    # over all ranks; 0 / empty: the whole shard is one mini-batch with the global counts above.
    mini_size: int = 0
    mini_batches: list[tuple[int, int]] = field(default_factory=list)


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
    """Created on its node first, then `setup()` with rank 0's address: the rendezvous lives where rank 0 runs."""

    def __init__(self, rank: int, world_size: int, model_dir: str, options: dict):
        self.rank, self.world_size, self.o, self.model_dir = rank, world_size, options, model_dir

    def endpoint(self) -> str:
        """host:port for torch.distributed's store, found free on THIS node (rank 0 hosts the store)."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return f"{ray.util.get_node_ip_address()}:{port}"

    def setup(self, master: str) -> None:
        options, device = self.o, self.o["device"]
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // self.world_size))
        if device == "cuda":
            torch.cuda.set_device(0)  # Ray assigns one GPU per actor and sets CUDA_VISIBLE_DEVICES.
        # A bounded timeout: a rank that dies mid-collective fails the others instead of hanging them.
        dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"tcp://{master}",
                                rank=self.rank, world_size=self.world_size,
                                timeout=timedelta(seconds=options["collective_timeout_s"]))
        mesh = init_device_mesh(device, (self.world_size,))
        torch.manual_seed(options["seed"])
        dtype = DTYPES[options["dtype"]]
        self.adapter = load_adapter(self.model_dir)
        self.model = load_model(self.model_dir, dtype=dtype, attn_implementation=options["attn_implementation"])
        self.model.to(device)
        self.model.train()
        if options.get("gradient_checkpointing"):
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        shard_model(self.model, mesh)
        self.ref = None
        if options["needs_reference"]:
            self.ref = load_model(self.model_dir, dtype=dtype, attn_implementation=options["attn_implementation"])
            self.ref.to(device).requires_grad_(False)
            shard_model(self.ref, mesh)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=options["lr"], betas=tuple(options["betas"]),
                                           weight_decay=options["weight_decay"])
        self.device = device

    # -- helpers -----------------------------------------------------------------------------------

    def _micro_batches(self, shard: Shard, start: int = 0, end: int | None = None) -> list[tuple]:
        """(batch, advantages, old, ref, response lengths) per micro-batch of responses [start, end), on the CPU.

        Each is moved to the device only while it is used (`_on_device`), so a step's media never
        sit on the accelerator all at once.
        """
        mbs = self.o["micro_batch_size"]
        out = []
        end = len(shard.responses) if end is None else end
        for i in range(start, end, mbs):
            stop = min(i + mbs, end)
            batch = self.adapter.collate(shard.prompts[i:stop], shard.responses[i:stop])
            shape = batch.response_mask.shape
            values = [_padded(rows[i:stop], shape) if rows else None
                      for rows in (shard.advantages, shard.old_log_probs, shard.ref_log_probs)]
            out.append((batch, *values, [len(r) for r in shard.responses[i:stop]]))
        return out

    def _on_device(self, item: tuple) -> tuple:
        batch, *values, lengths = item
        return (batch.to(self.device), *(v.to(self.device) if v is not None else None for v in values), lengths)

    def _log_probs(self, model, batch, with_entropy=False):
        return response_log_probs(model, batch, temperature=self.o["temperature"], with_entropy=with_entropy)

    # -- the step ----------------------------------------------------------------------------------

    def log_probs(self, shard: Shard) -> dict[str, list[list[float]] | None]:
        """Log-probs of each response under the current policy ("old") and the reference, before the update."""
        old, ref = [], []
        with torch.no_grad():
            for item in self._micro_batches(shard):
                batch, *_, lengths = self._on_device(item)
                # Cut at the response's own length: a masked position (e.g. a vision token the
                # policy sampled) keeps its place instead of shifting the rest.
                lp = self._log_probs(self.model, batch)[0].float().cpu()
                old.extend(lp[row, :n].tolist() for row, n in enumerate(lengths))
                if self.ref is not None:
                    rp = self._log_probs(self.ref, batch)[0].float().cpu()
                    ref.extend(rp[row, :n].tolist() for row, n in enumerate(lengths))
        return {"old": old, "ref": ref if self.ref is not None else None}

    def step(self, shard: Shard, lr: float) -> dict[str, float]:
        """`ppo_epochs` passes over the shard's mini-batches, one optimizer step per mini-batch."""
        self._set_lr(lr)
        size = shard.mini_size or len(shard.responses)
        minis = [self._micro_batches(shard, i, i + size) for i in range(0, len(shard.responses), size)]
        agg = self.o["loss_agg_mode"]
        sums: dict[str, float] = {}
        count = updates = 0
        for _ in range(self.o["ppo_epochs"]):
            for k, mini in enumerate(minis):
                tokens, seqs = shard.mini_batches[k] if shard.mini_batches else (shard.global_token_count,
                                                                                 shard.global_sequence_count)
                # Global counts make every aggregation mode an exact mean over micro-batches and ranks;
                # Dr. GRPO's constant normaliser is C per sequence (TRL's B·C), so the lr keeps its meaning.
                counts = {"global_token_count": tokens, "global_seq_count": seqs,
                          "loss_scale_factor": self.o["loss_scale_factor"] * seqs}
                self.optimizer.zero_grad(set_to_none=True)
                for item in mini:
                    metrics = self._backward(self._on_device(item), counts, agg)
                    for key, v in metrics.items():
                        sums[key] = sums.get(key, 0.0) + v
                    count += 1
                sums["actor/grad_norm"] = sums.get("actor/grad_norm", 0.0) + self._clip_and_step()
                updates += 1
        out = {k: v / max(count, 1) for k, v in sums.items()}
        # pg_loss shares add up within a mini-batch and average over mini-batches and epochs.
        out["actor/pg_loss"] = sums.get("actor/pg_loss", 0.0) * self.world_size / max(updates, 1)
        out["actor/grad_norm"] = sums.get("actor/grad_norm", 0.0) / max(updates, 1)
        out["actor/lr"] = lr
        out["actor/updates"] = float(updates)
        return out

    def _backward(self, item: tuple, counts: dict, agg: str) -> dict[str, float]:
        batch, adv, old_lp, ref_lp, _ = item
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
        # pg_loss is this micro-batch's share of the mini-batch loss: shares add up (see `step`).
        metrics["actor/pg_loss"] = float(pg_loss.detach())
        return metrics

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
        for item in self._micro_batches(shard):
            batch = self._on_device(item)[0]
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


def _padded(rows: list[list[float]], shape) -> torch.Tensor:
    """Per-response value lists → a [B, L] float tensor, zero past each response's length."""
    out = torch.zeros(shape, dtype=torch.float32)
    for row, values in enumerate(rows):
        out[row, : len(values)] = torch.tensor(values, dtype=torch.float32)
    return out


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
