"""One FSDP2 rank of the actor: the policy (sharded, trained with AdamW) and the frozen reference.

A Ray actor wraps this class (`actor_group.py`); every rank receives an equal share of the step's
sequences and runs the same number of forward/backward passes, because FSDP2's all-gathers and
reduce-scatters are collectives that every rank must enter together.
"""

from __future__ import annotations

import math
import os
import socket
from dataclasses import replace
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from evr1 import rl
from evr1.cluster.processes import peak_rss_mb
from evr1.models import encode_visual, grouped_response_log_probs, load_adapter, response_log_probs
from evr1.models.batch import to_device
from evr1.models.packed import host_prepared, packed_response_log_probs, supports_packing
from evr1.models.runtime import VisionPassCounter
from evr1.models.shared_prefix import VisualFeatures
from evr1.train.protocol import ReaderSpec, Shard, prompt_runs, row_key, shard_slices
from evr1.train.seeds import seed_of
from evr1.train.workers.engine_host import EngineHost
from evr1.train.workers.host_copies import (
    has_media,
    host_values,
    padded,
    response_rows,
    tensors_in,
    to_host,
    wait_for_copies,
)
from evr1.train.workers.precision import precision
from evr1.train.workers.prompt_prep import READ_ERRORS, PromptPrep
from evr1.train.workers.sequence_parallel import sp_groups, sp_response_log_probs
from evr1.train.workers.policy_state import PolicyState
from evr1.train.workers.sharded_load import build_replicated, build_sharded, shard_model
from evr1.train.workers.update_loss import update_loss


class PolicyWorker(PolicyState, EngineHost):
    """Created on its node first, then `setup()` with rank 0's address: the rendezvous lives where rank 0 runs."""

    def __init__(self, rank: int, world_size: int, model_dir: str, options: dict, spec: ReaderSpec | None = None):
        self.rank, self.world_size, self.o, self.model_dir, self.spec = rank, world_size, options, model_dir, spec
        self.unreadable: set[str] = set()

    def endpoint(self) -> str:
        """host:port for torch.distributed's store, found free on THIS node (rank 0 hosts the store)."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return f"{ray.util.get_node_ip_address()}:{port}"

    def setup(self, master: str) -> None:
        options, device = self.o, self.o["device"]
        if options.get("cpus"):  # trainer.cpus: the ranks' own cores (asynchronous rollouts on one machine)
            os.sched_setaffinity(0, options["cpus"])
        cores = len(options["cpus"]) if options.get("cpus") else (os.cpu_count() or 2)
        torch.set_num_threads(max(1, cores // self.world_size))
        if device == "cuda":
            torch.cuda.set_device(0)  # Ray assigns one GPU per actor and sets CUDA_VISIBLE_DEVICES.
        # A bounded timeout: a rank that dies mid-collective fails the others instead of hanging them.
        dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"tcp://{master}",
                                rank=self.rank, world_size=self.world_size,
                                timeout=timedelta(seconds=options["collective_timeout_s"]))
        mesh = init_device_mesh(device, (self.world_size,))
        # Ranks [0..k-1], [k..2k-1], ... split each sequence (trainer.sequence_parallel = k) and share a shard.
        self.sp = sp_groups(self.world_size, options.get("sequence_parallel", 1))
        torch.manual_seed(options["seed"])
        prec = precision(options["dtype"], device)
        self.adapter = load_adapter(self.model_dir)
        self.prep = PromptPrep(self.adapter, self.spec, limit=options.get("prefetch_prompts", 64)) if self.spec else None
        self.dtype = prec.compute  # pixel values enter the model in the dtype it computes in
        self.frozen_vision = bool(options.get("freeze_vision_tower"))
        self.packed = (bool(options.get("padding_free", True)) and supports_packing(self.adapter.family.name)
                       and self.sp.sp_size == 1)
        # A frozen tower's features do not change within a step, and the reference holds the same tower:
        # each prompt is encoded once per step (`_encode`), kept on the CPU between passes.
        self.reuse_visual = self.frozen_vision and self.sp.sp_size == 1 and options.get("reuse_vision_features", True)
        self._visual: dict[str, VisualFeatures] = {}
        self._encoded_this_step = False  # whether a log-prob pass ran (and encoded) since the last update

        def policy(m):
            m.train()
            if options.get("gradient_checkpointing"):
                m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if self.frozen_vision:
                m.model.visual.requires_grad_(False)  # no gradients, no optimizer state, no saved activations

        # Rank 0 reads the checkpoint, the others build on the meta device: one host copy per node.
        build = dict(rank=self.rank, dtype=prec.storage, attn_implementation=options["attn_implementation"],
                     device=device, shard=lambda m: shard_model(m, mesh, prec.policy))
        builder = build_sharded if options.get("meta_init", True) else build_replicated
        self.model = builder(self.model_dir, prepare=policy, **build)
        self.ref = None
        if options["needs_reference"]:
            # Stored in bf16 under bf16 mixed precision (`Precision.reference`): it only runs forwards.
            self.ref = builder(self.model_dir, prepare=lambda m: m.eval().requires_grad_(False),
                               **{**build, "dtype": prec.reference})
        self.vision_passes = [VisionPassCounter(m) for m in (self.model, self.ref) if m is not None]
        trainable = [p for p in self.model.parameters() if p.requires_grad]  # a frozen tower has no Adam state
        self.optimizer = torch.optim.AdamW(trainable, lr=options["lr"], betas=tuple(options["betas"]),
                                           weight_decay=options["weight_decay"])
        self.device = device

    # -- helpers -----------------------------------------------------------------------------------

    def peak_rss_mb(self) -> float:
        return peak_rss_mb()

    def prefetch(self, rows: list[dict]) -> None:
        """Start reading the prompts this rank expects next, in the background (see `PromptPrep`)."""
        self.prep.prefetch(rows)

    def _prompt(self, row: dict) -> tuple[object, bool]:
        """(the row's prompt, readable). Unreadable media here (the rollout worker could read them):
        a text-only stand-in whose response is masked out, so this rank still runs every pass its
        peers run (FSDP2's collectives) and the sample weighs nothing."""
        try:
            return self.prep.get(row), True
        except READ_ERRORS:
            self.unreadable.add(row_key(row))
            return self.adapter.encode_prompt("", defer_media=True), False

    def _micro_batches(self, shard: Shard, mini: int = 0) -> list[list[tuple]]:
        """Mini-batches of micro-batches: (batch, advantages, old, ref, entropy-bonus weights, response
        lengths, prompt groups), on the CPU. A group is (prompt, its responses) over consecutive rows of one prompt.

        Prompts hold uint8 frames; each micro-batch is moved to the device and prepared there only
        while it is used (`_on_device`), so a step's media never sit on the accelerator all at once.
        """
        if self._visual:  # features the colocated engine stored for prompts this rank does not train on
            keep = {row_key(row) for row in shard.rows}
            for key in [k for k in self._visual if k not in keep]:
                del self._visual[key]
        out: list[list[tuple]] = []
        for cuts in shard_slices(shard, self.o["micro_batch_size"], mini):
            out.append([self._micro_batch(shard, i, stop) for i, stop in cuts])
        return out

    def _micro_batch(self, shard: Shard, i: int, stop: int) -> tuple:
        """Responses [i, stop) of the shard as one micro-batch (see `_micro_batches`)."""
        prompts, readable = zip(*(self._prompt(row) for row in shard.rows[i:stop]))
        batch = self.adapter.collate(list(prompts), shard.responses[i:stop])
        for row, ok in enumerate(readable):
            if not ok:
                batch.response_mask[row] = 0
        shape = batch.response_mask.shape
        values = [padded(rows[i:stop], shape) if rows else None
                  for rows in (shard.advantages, shard.old_log_probs, shard.ref_log_probs, shard.entropy_weights)]
        keys = [row_key(r) if ok else None for r, ok in zip(shard.rows[i:stop], readable)]
        groups = [(prompts[a], shard.responses[i + a:i + b], keys[a]) for a, b in prompt_runs([row_key(r) for r in
                                                                                              shard.rows[i:stop]])]
        return (batch, *values, [len(r) for r in shard.responses[i:stop]], groups)

    def _on_device(self, item: tuple, *, media: bool = True, encode: bool = True) -> tuple:
        """The micro-batch's tensors on the device; `media` False leaves the frames unprepared (the
        grouped path prepares each prompt once itself). With a reused frozen tower the batch carries
        its prompts' features instead of pixels (`ModelBatch.with_visual`): encoded here in a step's
        first pass over its shard (`encode`), taken from the step's store in the update."""
        batch, *values, lengths, groups = item
        if media and self.sp.sp_size == 1:  # positions on the host (the sequence-parallel split makes its own)
            batch = host_prepared(self.model, batch, packed=self.packed)
        if self.reuse_visual:
            self._encode(groups, collective=encode)
            rows = [key for _, responses, key in groups for _ in responses]
            batch = batch.with_visual(VisualFeatures.concat([self._visual[k] for k in rows if k is not None]))
        # On an accelerator through pinned memory, without a host wait (`to_device`; see `step`).
        moved = batch.to(self.device, dtype=self.dtype, non_blocking=True) if media or self.reuse_visual else replace(
            batch, response_mask=to_device(batch.response_mask, self.device, non_blocking=True))
        return (moved, *(to_device(v, self.device, non_blocking=True) if v is not None else None for v in values),
                lengths, groups)

    def _encode(self, groups: list[tuple], *, collective: bool) -> None:
        """Vision features of the micro-batch's prompts not yet encoded this step, with the frozen tower.
        In a first pass (`collective`) every rank calls this once per micro-batch and FSDP2 gathers the
        root unit (the tower is in it) for the direct calls to the tower, whether or not this rank has
        media to encode; the update's micro-batches hold the same prompts, already encoded. A prompt
        its colocated engine generated from is in the store already (`build_engine`): not encoded again."""
        todo = {key: prompt for prompt, _, key in groups if key is not None and key not in self._visual}
        if not collective:
            if todo:
                raise RuntimeError(f"rank {self.rank}: prompts {sorted(todo)} reached the update without the "
                                   "log-prob pass encoding them")
            return
        self.model.unshard()
        encoded = {}
        try:
            with torch.no_grad():
                for key, prompt in todo.items():
                    # In through pinned memory, out into pinned memory: no host wait per prompt (issue 33).
                    mm = self.adapter.collate([prompt]).to(self.device, dtype=self.dtype, non_blocking=True)
                    encoded[key] = encode_visual(self.model, mm).to("cpu", non_blocking=True)
            wait_for_copies(self.device)  # one wait for all of them, before the store hands them out
        finally:
            self.model.reshard()
        self._visual.update(encoded)

    def _grouped(self, model, item: tuple, calls: int, *, with_entropy: bool = False):
        """Log-probs (and entropy) [B, Lr] of a micro-batch, each prompt run once under its n responses
        (`grouped_response_log_probs`), plus a zero term tying `calls - groups` padding calls into
        the graph: every rank runs `calls` grouped calls, so FSDP2's collectives stay in step."""
        batch, *_, groups = item
        mask = batch.response_mask.bool()
        width = mask.shape[1]
        options = {"temperature": self.o["temperature"], "with_entropy": with_entropy, "dtype": self.dtype,
                   "chunk_tokens": self.o.get("logits_chunk_tokens")}

        def visual(key):
            return self._visual[key].to(self.device) if self.reuse_visual and key is not None else None
        parts = [grouped_response_log_probs(model, self.adapter, prompt, responses, visual=visual(key), **options)
                 for prompt, responses, key in groups]
        zero = torch.zeros((), device=mask.device)
        for _ in range(calls - len(groups)):
            pad_lp, pad_ent = grouped_response_log_probs(model, self.adapter, groups[0][0], [[self.adapter.pad_token_id]],
                                                         visual=visual(groups[0][2]), **options)
            zero = zero + 0.0 * (pad_lp.sum() + (pad_ent.sum() if pad_ent is not None else 0.0))

        def rows(k):
            full = torch.cat([torch.nn.functional.pad(p[k], (0, width - p[k].shape[1])) for p in parts])
            return torch.where(mask, full, torch.zeros_like(full))  # unreadable rows weigh nothing
        return rows(0), (rows(1) if with_entropy else None), zero

    def _log_probs(self, model, batch, with_entropy=False, temperature=None):
        """Unshared log-probs of a micro-batch: split over the sequence-parallel group, else packed
        (padding-free) where the family allows it, else padded."""
        options = {"temperature": temperature or self.o["temperature"], "with_entropy": with_entropy,
                   "chunk_tokens": self.o.get("logits_chunk_tokens")}
        if self.sp.sp_size > 1:
            return sp_response_log_probs(model, batch, self.sp.group, **options)
        return (packed_response_log_probs if self.packed else response_log_probs)(model, batch, **options)

    # -- the step ----------------------------------------------------------------------------------

    def log_probs(self, shard: Shard, old_log_probs: bool = True) -> dict[str, list[list[float]] | None]:
        """Log-probs of each response under the current policy ("old") and the reference, before the update.
        `old_log_probs` False (a strictly on-policy update, whose old log-probs are its own): the
        reference's alone, and "old" is None."""
        old, ref = [], []
        calls = shard.log_prob_calls
        skip_old = not old_log_probs
        self._encoded_this_step = True  # this pass encodes the step's media (`_on_device`), not the update
        copies: list[tuple[torch.Tensor, list[int], list]] = []  # (host copy in flight, lengths, destination)
        with torch.no_grad():
            for k, item in enumerate((self._micro_batches(shard) or [[]])[0]):
                item = self._on_device(item, media=not calls)
                batch, *_, lengths, _ = item
                models = ([] if skip_old else [(self.model, old)]) + ([(self.ref, ref)] if self.ref is not None else [])
                for model, out in models:
                    lp = (self._grouped(model, item, calls[k])[0] if calls else self._log_probs(model, batch)[0])
                    # Copied to pinned host memory behind the queued work, read once after the last
                    # micro-batch: no host sync per micro-batch and model (`to_host`).
                    copies.append((to_host(lp.float()), lengths, out))
        wait_for_copies(self.device)
        for lp, lengths, out in copies:
            # Cut at the response's own length: a masked position (e.g. a vision token the
            # policy sampled) keeps its place instead of shifting the rest.
            out.extend(lp[row, :n].tolist() for row, n in enumerate(lengths))
        return {"old": None if skip_old else old, "ref": ref if self.ref is not None else None,
                "data_wait_s": self.prep.take_wait()}

    def step(self, shard: Shard, lr: float, step_index: int = 0) -> dict:
        """`ppo_epochs` passes over the shard's mini-batches, one optimizer step per mini-batch.

        Returns the step's metrics (floats) and, under "rows", per response of the shard (None for one
        this rank could not read), from the first epoch: "entropy", the entropy of each response
        token (what `evr1.train.diagnostics` reads at the answer's tokens), and "log_probs", the
        update's own log-probs, when the shard carries no old ones (the skipped pass: they are the
        old log-probs, for the driver's comparison with the engine's). `step_index` (the trainer's
        step) seeds Clip-Cov's token draw, with the run seed, the epoch and the micro-batch.
        """
        self._set_lr(lr)
        minis = self._micro_batches(shard, shard.mini_size)
        cuts = shard_slices(shard, self.o["micro_batch_size"], shard.mini_size)
        skipped = shard.old_log_probs is None  # strictly on-policy: the update's log-probs are the old ones
        if skipped and (self.o["ppo_epochs"] > 1 or len(minis) > 1):
            raise ValueError(f"rank {self.rank}: the shard carries no old log-probs, but the update is not strictly "
                             f"on-policy ({self.o['ppo_epochs']} epochs of {len(minis)} mini-batches): its own "
                             "log-probs would stand for the old ones after the policy moved")
        # No log-prob pass ran this step (skipped, and no reference): the first epoch encodes the media.
        encode, self._encoded_this_step = not self._encoded_this_step, False
        agg = self.o["loss_agg_mode"]
        # Each micro-batch's metrics stay 0-d tensors on the device until the step ends, then come to the
        # host in one copy (`host_values`): reading one (`.item()`, `float()`) blocks the host until the
        # device has run everything queued, so a read per metric per micro-batch before `backward` left
        # the device idle while the host queued each backward and the next forward.
        micro_metrics: list[dict[str, torch.Tensor]] = []
        grad_norms: list[float] = []
        updates = 0
        # (first row, lengths, readable rows, entropy and log-probs on their way to the host) per micro-batch
        kept: list[tuple[int, list[int], list[bool], torch.Tensor, torch.Tensor | None]] = []
        for epoch in range(self.o["ppo_epochs"]):
            calls = iter(shard.update_calls)  # the same micro-batches every epoch
            for k, mini in enumerate(minis):
                tokens, seqs = shard.mini_batches[k] if shard.mini_batches else (shard.global_token_count,
                                                                                 shard.global_sequence_count)
                # Global counts make every aggregation mode an exact mean over micro-batches and ranks;
                # Dr. GRPO's constant normaliser is C per sequence (TRL's B·C), so the lr keeps its meaning.
                counts = {"global_token_count": tokens, "global_seq_count": seqs,
                          "loss_scale_factor": self.o["loss_scale_factor"] * seqs}
                bonus = self._bonus(shard, k)
                self.optimizer.zero_grad(set_to_none=True)
                for j, item in enumerate(mini):
                    call = next(calls, 0)
                    seed = seed_of(self.o["seed"], step_index, epoch, k, j, self.sp.dp_rank)
                    readable = item[0].response_mask.bool().any(dim=1).tolist()
                    metrics, entropy, log_probs = self._backward(
                        self._on_device(item, media=not call, encode=encode and epoch == 0), counts, agg, call, seed,
                        bonus)
                    micro_metrics.append(metrics)
                    if epoch == 0:
                        kept.append((cuts[k][j][0], item[-2], readable, to_host(entropy),
                                     to_host(log_probs) if skipped else None))
                grad_norms.append(self._clip_and_step())
                updates += 1
        sums: dict[str, float] = {}
        for metrics in host_values(micro_metrics):  # summed in float64 on the host, in micro-batch order
            for key, v in metrics.items():
                sums[key] = sums.get(key, 0.0) + v
        sums["actor/grad_norm"] = sum(grad_norms, 0.0)
        count = len(micro_metrics)
        out: dict = {k: v / max(count, 1) for k, v in sums.items()}
        # pg_loss shares add up within a mini-batch and average over mini-batches and epochs.
        # (a sequence-parallel group's ranks hold the same share: count it once per data-parallel index)
        out["actor/pg_loss"] = sums.get("actor/pg_loss", 0.0) * self.sp.dp_size / max(updates, 1)
        out["actor/grad_norm"] = sums.get("actor/grad_norm", 0.0) / max(updates, 1)
        out["actor/lr"] = lr
        out["actor/updates"] = float(updates)
        if torch.device(self.device).type == "cuda":  # since the rank started: loading, log-probs and updates
            out["perf/rank_peak_device_mb"] = torch.cuda.max_memory_allocated() / 2**20
        out.update(self._data_metrics())
        # No wait of its own for the `kept` copies: they were queued on this stream before the grad-norm
        # reads and `host_values`' copy, which wait for the stream, so they have landed (one host wait
        # per step, not two: benchmarks/bench_step_syncs.py).
        out["rows"] = response_rows(kept, len(shard.rows), with_log_probs=skipped)
        return out

    def _data_metrics(self) -> dict[str, float]:
        """Per-rank data figures for the step; the step's prompts are released (next ones stay prefetched)."""
        self.prep.release()
        self._visual.clear()  # the next step's prompts are others, or the same under new weights
        out = {"data/rank_unreadable": float(len(self.unreadable)), "time/rank_data_wait_s": self.prep.take_wait(),
               "perf/rank_peak_rss_mb": peak_rss_mb(), **self.prep.take_reads(),
               "perf/rank_vision_passes": float(sum(c.take() for c in self.vision_passes))}
        self.unreadable.clear()
        return out

    def _bonus(self, shard: Shard, mini: int) -> tuple[float, int | None]:
        """The entropy bonus's coefficient for this step and, when the driver chose its tokens
        (`shard.entropy_weights`), how many of mini-batch `mini`'s responses (over all ranks) have any."""
        coeff = self.o["entropy_coeff"] if shard.entropy_coeff is None else shard.entropy_coeff
        return coeff, (shard.entropy_counts[mini] if shard.entropy_weights is not None else None)

    def _backward(self, item: tuple, counts: dict, agg: str, calls: int = 0, seed: int = 0,
                  bonus: tuple[float, int | None] = (0.0, None)) -> tuple[dict[str, torch.Tensor], torch.Tensor,
                                                                         torch.Tensor]:
        """One micro-batch's loss (`update_loss`: `counts`, `seed` and `bonus` are its) and backward;
        `calls` > 0: the shared-prefix path with that many grouped calls. Returns its metrics, detached
        0-d tensors on the device (nothing here waits for the device, see `step`), and its per-token
        entropy and log-probs [B, L], detached."""
        batch, adv, old_lp, ref_lp, weights, _, _ = item
        mask = batch.response_mask.float()
        if calls:
            log_probs, entropy, zero = self._grouped(self.model, item, calls, with_entropy=True)
        else:
            (log_probs, entropy), zero = self._log_probs(self.model, batch, with_entropy=True), 0.0
        log_probs = log_probs.float()
        loss, pg_loss, metrics = update_loss(self.o, log_probs, entropy, adv, old_lp, ref_lp, mask, counts, agg,
                                             seed=seed, bonus_weights=weights, bonus=bonus)
        loss = loss + zero
        if not has_media(batch) and not self.frozen_vision:
            loss = loss + 0.0 * self._visual_dummy()
        # The loss is already normalised by global counts; FSDP2 averages gradients over ranks,
        # so multiplying by the world size turns that average into the exact global sum. (Under
        # sequence parallelism each rank's gradient is its share of its group's: the sum is exact too.)
        (loss * self.world_size).backward()
        # pg_loss is this micro-batch's share of the mini-batch loss: shares add up (see `step`).
        metrics["actor/pg_loss"] = pg_loss.detach()
        return metrics, entropy.detach().float(), log_probs.detach()

    def _clip_and_step(self) -> float:
        """Clip the global grad norm; skip the optimizer step when it is not finite (as the reference does)."""
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.o["grad_clip"])
        grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        value = float(grad_norm)  # the step's one wait for the device: the decision needs the value
        if math.isfinite(value):
            self.optimizer.step()
        return value

    def sft_step(self, shard: Shard) -> dict[str, float]:
        """One supervised step on given responses (a cold start): token-mean negative log-likelihood."""
        self._set_lr(self.o["warmup_lr"])
        self.optimizer.zero_grad(set_to_none=True)
        # Summed on the device in float64 (the same sums as Python floats, in the same order) and read
        # once with the grad norm: no host wait per micro-batch.
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        for item in (self._micro_batches(shard) or [[]])[0]:
            batch = self._on_device(item)[0]
            log_probs, _ = self._log_probs(self.model, batch, temperature=1.0)
            nll = rl.aggregate_loss(-log_probs.float(), batch.response_mask, "token-mean",
                                    global_token_count=shard.global_token_count)
            if not has_media(batch) and not self.frozen_vision:
                nll = nll + 0.0 * self._visual_dummy()
            (nll * self.world_size).backward()  # see `step`: FSDP2 averages over ranks
            total += nll.detach().to(torch.float64)
        if self.o.get("warmup_keeps_vision", True):
            # The format is text: a warm-up that updates the tower drives its features towards a
            # constant (measured on the learning task: per-clip spread / norm 0.43 → 0.10 in 60
            # steps), and RL then starts from a tower that barely tells clips apart.
            for param in self.model.model.visual.parameters():
                param.grad = None  # AdamW skips a parameter without a gradient
        grad_norm = self._clip_and_step()
        self._data_metrics()
        return {"warmup/nll": float(total) * self.sp.dp_size, "warmup/grad_norm": grad_norm}

    def _visual_dummy(self) -> torch.Tensor:
        """A zero-weight pass through the vision tower for a micro-batch without media.

        Keeps every rank's collectives identical when one rank's micro-batch is text-only.
        """
        f = self.adapter.family.factor
        dummy = self.adapter.encode_prompt("<image>", images=[np.zeros((f, f, 3), dtype=np.uint8)]).mm
        out = self.model.model.visual(dummy["pixel_values"].to(self.device), grid_thw=dummy["image_grid_thw"].to(self.device))
        # Every output, deepstack features included, so every vision parameter receives a (zero) gradient.
        return sum(t.sum() for t in tensors_in(out) if t.is_floating_point())

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
