"""Weights from policy rank 0 to rollout workers in other processes: a broadcast group of their own.

Rank 0 and the K rollout workers form a process group apart from FSDP's (a `TCPStore` at an address
rank 0 picks, and a gloo group built on it directly, so the FSDP ranks' default group is untouched,
as OpenRLHF's and vLLM's stateless groups do). Rank 0 packs the gathered tensors into buckets
(`weight_sync.pack_buckets`) and broadcasts each: first a header (the bucket's size and its tensors'
names, dtypes, shapes and offsets, pickled into a byte tensor), then the buffer; an empty header ends
the stream. Every worker receives the same bytes at once: nothing goes through the driver or Ray's
object store, one bucket at a time exists on each side.

gloo moves host tensors (CPU runs, and GPU runs where the bytes are staged on the host); an NCCL
group for GPU-resident buckets is the same protocol on `ProcessGroupNCCL` and has not been written
or run (no GPU here).
"""

from __future__ import annotations

import pickle
import socket
from collections.abc import Iterable, Iterator
from datetime import timedelta

import torch
import torch.distributed as dist

from evr1.train.weight_sync import Bucket, TensorMeta, pack_buckets, unpack

_HEADER_LEN = 1  # an int64 tensor holding the pickled header's length (0: end of stream)


def free_endpoint() -> str:
    """host:port free on this node, for the group's store (called on the node of the group's rank 0)."""
    import ray

    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    return f"{ray.util.get_node_ip_address()}:{port}"


class BroadcastGroup:
    """Member `rank` of a gloo group of `size` processes rooted at rank 0 (the sender)."""

    def __init__(self, endpoint: str, rank: int, size: int, *, timeout_s: float = 600.0):
        host, port = endpoint.rsplit(":", 1)
        store = dist.TCPStore(host, int(port), size, is_master=rank == 0, timeout=timedelta(seconds=timeout_s))
        self.pg = dist.ProcessGroupGloo(dist.PrefixStore("evr1-weights", store), rank, size,
                                        timedelta(seconds=timeout_s))
        self._store = store  # kept alive with the group
        self.rank, self.size = rank, size

    def _broadcast(self, tensor: torch.Tensor) -> None:
        self.pg.broadcast(tensor, 0).wait()

    def send(self, items: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int) -> dict[str, float]:
        """Rank 0: every (name, tensor) to every member, in buckets; returns tensors, bytes, buckets."""
        if self.rank != 0:
            raise RuntimeError("BroadcastGroup.send: only rank 0 sends")
        tensors = nbytes = buckets = 0
        for bucket in pack_buckets(items, bucket_bytes):
            header = pickle.dumps((bucket.buffer.numel(), bucket.metas), protocol=5)
            self._broadcast(torch.tensor([len(header)], dtype=torch.int64))
            self._broadcast(torch.frombuffer(bytearray(header), dtype=torch.uint8))
            self._broadcast(bucket.buffer.contiguous())
            tensors += len(bucket.metas)
            nbytes += sum(m.nbytes for m in bucket.metas)
            buckets += 1
        self._broadcast(torch.zeros(_HEADER_LEN, dtype=torch.int64))
        return {"tensors": float(tensors), "bytes": float(nbytes), "buckets": float(buckets)}

    def receive(self) -> Iterator[tuple[str, torch.Tensor]]:
        """A worker: the sender's (name, tensor) pairs as each bucket arrives (views of its buffer,
        valid until the next bucket is requested)."""
        while True:
            length = torch.zeros(_HEADER_LEN, dtype=torch.int64)
            self._broadcast(length)
            if not int(length[0]):
                return
            header = torch.empty(int(length[0]), dtype=torch.uint8)
            self._broadcast(header)
            size, metas = pickle.loads(header.numpy().tobytes())
            buffer = torch.empty(size, dtype=torch.uint8)
            self._broadcast(buffer)
            yield from unpack(Bucket(buffer, metas))

    def close(self) -> None:
        self.pg = None
        self._store = None


__all__ = ["BroadcastGroup", "TensorMeta", "free_endpoint"]
