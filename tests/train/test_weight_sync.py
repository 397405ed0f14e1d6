"""The pieces of a weight sync that need no process group: buckets, completeness, accounting, and the
iterator on a model that is not sharded (the FSDP2 side: test_sync_iterator_gloo.py)."""

from __future__ import annotations

import pickle

import pytest
import torch

from evr1.train.weight_sync import (
    ALIGN,
    Bucket,
    SyncIncomplete,
    SyncReport,
    TensorMeta,
    check_complete,
    counting,
    iter_sync_weights,
    pack_buckets,
    sync_names,
    unpack,
)


def _items() -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        ("a.fp32", torch.randn(3, 5, generator=g)),
        ("b.bf16", torch.randn(7, generator=g).to(torch.bfloat16)),
        ("c.int64", torch.arange(6, dtype=torch.int64).reshape(2, 3)),
        ("d.scalar", torch.tensor(2.5)),
        ("e.empty", torch.empty(0, 4, dtype=torch.bfloat16)),
        ("f.bool", torch.tensor([True, False, True])),
        ("g.large", torch.randn(40, 30, generator=g)),  # 4800 bytes: over the bucket below
        ("h.bf16_2d", torch.randn(4, 4, generator=g).to(torch.bfloat16)),
        ("i.strided", torch.randn(6, 4, generator=g).t()),  # not contiguous
    ]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


@pytest.mark.parametrize("reuse", [False, True])
def test_pack_unpack_round_trips_every_dtype_and_shape(reuse):
    items = _items()
    got, sizes = [], []
    for bucket in pack_buckets(items, 256, reuse=reuse):
        assert bucket.buffer.dtype == torch.uint8 and bucket.buffer.is_contiguous()
        sizes.append((bucket.nbytes, len(bucket)))
        got += [(n, t.clone()) for n, t in unpack(bucket)]  # a reused buffer: used before the next bucket
    assert [n for n, _ in got] == [n for n, _ in items]
    for (name, want), (_, have) in zip(items, got, strict=True):
        assert have.dtype == want.dtype and have.shape == want.shape and torch.equal(have, want), name
    # the 4800-byte tensor alone in a bucket of its own size; every other bucket within 256 bytes
    assert (4800, 1) in sizes
    assert all(n <= 256 for n, count in sizes if count > 1)


def test_buckets_fill_to_the_limit_and_align_offsets():
    items = [(f"t{i}", torch.full((5,), float(i))) for i in range(8)]  # 20 bytes each, offsets 0, 16·2, ...
    buckets = list(pack_buckets(items, 64))
    # 20 bytes at 0, next at 32 (aligned), ends at 52; a third would start at 64 and end at 84 > 64
    assert [[m.offset for m in b.metas] for b in buckets] == [[0, 32]] * 4
    assert all(m.offset % ALIGN == 0 for b in buckets for m in b.metas)
    assert [b.nbytes for b in buckets] == [52] * 4
    # exactly filling a bucket keeps the tensor in it
    exact = list(pack_buckets([("x", torch.zeros(4)), ("y", torch.zeros(12))], 64))
    assert [[m.name for m in b.metas] for b in exact] == [["x", "y"]]
    assert exact[0].metas[1] == TensorMeta("y", torch.float32, (12,), 16, 48)


def test_an_oversize_tensor_goes_alone_between_the_buckets_around_it():
    items = [("s1", torch.ones(2)), ("big", torch.arange(100.0)), ("s2", torch.ones(3))]
    buckets = list(pack_buckets(items, 64))
    assert [[m.name for m in b.metas] for b in buckets] == [["s1"], ["big"], ["s2"]]
    assert buckets[1].nbytes == 400 and torch.equal(unpack(buckets[1])[0][1], torch.arange(100.0))


def test_items_need_to_live_only_until_the_next_one():
    """`iter_sync_weights` may hand out views freed at the next item: packing copies each at once."""
    scratch = torch.empty(8)

    def producer():
        for i in range(5):
            scratch.fill_(float(i))
            yield f"t{i}", scratch
    got = [(n, t.clone()) for b in pack_buckets(producer(), 80) for n, t in unpack(b)]
    assert [float(t[0]) for _, t in got] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_a_bucket_survives_pickling():
    bucket = next(pack_buckets(_items()[:3], 1024))
    back = pickle.loads(pickle.dumps(bucket))
    assert isinstance(back, Bucket)
    for (n, a), (m, b) in zip(unpack(bucket), unpack(back), strict=True):
        assert n == m and a.dtype == b.dtype and torch.equal(a, b)


def test_bucket_bytes_must_be_positive():
    with pytest.raises(ValueError, match="bucket_bytes"):
        list(pack_buckets(_items(), 0))


def test_counting_tallies_payload_bytes_tensors_and_names():
    items = _items()
    report = SyncReport(version=7)
    buckets = list(pack_buckets(counting(items, report), 256))
    report.buckets = len(buckets)
    assert report.bytes == sum(_nbytes(t) for _, t in items) == sum(m.nbytes for b in buckets for m in b.metas)
    assert report.tensors == len(items) and report.names == [n for n, _ in items]
    assert report.gather_s >= 0.0
    report.load_s, report.reset_s, report.wake_s, report.sleep_s = 1.0, 0.25, 0.5, 0.125
    metrics = report.as_metrics()
    assert metrics["perf/sync_bytes"] == float(report.bytes) and metrics["perf/sync_version"] == 7.0
    assert metrics["perf/sync_buckets"] == float(len(buckets)) and metrics["perf/sync_tensors"] == len(items)
    assert metrics["perf/sync_total_s"] == pytest.approx(report.gather_s + 1.875) == report.total_s
    assert set(report.as_metrics("x/")) == {f"x/{k}" for k in ("gather_s", "load_s", "reset_s", "wake_s", "sleep_s",
                                                               "bytes", "tensors", "buckets", "version", "total_s")}


def test_check_complete_names_what_is_missing_unexpected_or_repeated():
    check_complete(["a", "b"], ["b", "a"], where="rollout 0")  # complete: nothing raised
    expected = [f"layer.{i}" for i in range(10)]
    with pytest.raises(SyncIncomplete) as err:
        check_complete(["layer.0", "stray", "layer.1", "layer.1"], expected, where="rollout 3", show=3)
    message = str(err.value)
    assert message.startswith("rollout 3: weight sync incomplete")
    assert "8 missing (layer.2, layer.3, layer.4, … 5 more)" in message
    assert "1 unexpected (stray)" in message and "1 sent more than once (layer.1)" in message
    assert "[4 sent, 10 expected]" in message
    assert isinstance(err.value, RuntimeError)
    with pytest.raises(SyncIncomplete, match="0 sent"):
        check_complete([], ["w"], where="x")


class _Tiny(torch.nn.Module):
    """An unsharded stand-in: a tied output head, a persistent int buffer, a non-persistent one."""

    def __init__(self, head_first: bool = False):
        super().__init__()
        if head_first:  # the tied target registered before its source
            self.lm_head = torch.nn.Linear(4, 10, bias=False)
        self.embed = torch.nn.Embedding(10, 4)
        self.block = torch.nn.Linear(4, 4)
        if not head_first:
            self.lm_head = torch.nn.Linear(4, 10, bias=False)
        self.lm_head.weight = self.embed.weight
        self.register_buffer("steps", torch.tensor([3, 4], dtype=torch.int64))
        self.register_buffer("inv_freq", torch.ones(2), persistent=False)


def test_iter_sync_weights_on_an_unsharded_model_sends_tied_weights_once_and_casts_floats():
    model = _Tiny()
    for layerwise in (True, False):
        items = list(iter_sync_weights(model, dtype=torch.bfloat16, layerwise=layerwise))
        assert [n for n, _ in items] == ["steps", "embed.weight", "block.weight", "block.bias"] == sync_names(model)
        sd = model.state_dict()
        for name, t in items:
            want = sd[name].to(torch.bfloat16) if sd[name].is_floating_point() else sd[name]
            assert t.dtype == want.dtype and torch.equal(t, want) and not t.requires_grad, name
    kept = dict(iter_sync_weights(model, dtype=None))
    assert kept["embed.weight"].dtype == torch.float32 and kept["embed.weight"] is not model.embed.weight


def test_a_tied_target_is_left_out_under_the_name_transformers_saves():
    model = _Tiny(head_first=True)
    # (a module's own tensors come before its children's, as in `state_dict`)
    assert sync_names(model) == ["steps", "lm_head.weight", "block.weight", "block.bias"]  # no table: first name
    model._tied_weights_keys = {"lm_head.weight": "embed.weight"}  # transformers': {target: source}
    assert sync_names(model) == ["steps", "embed.weight", "block.weight", "block.bias"]
    names = [n for n, _ in iter_sync_weights(model, dtype=torch.float16)]
    assert names == sync_names(model)


def test_tied_names_sends_a_tied_tensor_under_each_name_one_after_the_other():
    """What a vLLM engine needs (`VLLMEngine.sync_tied_names`): its layerwise reload loses the tie, so
    `lm_head.weight` must arrive under its own name too; the same values, gathered once."""
    for head_first in (False, True):
        model = _Tiny(head_first=head_first)
        model._tied_weights_keys = {"lm_head.weight": "embed.weight"}
        items = list(iter_sync_weights(model, dtype=torch.bfloat16, tied_names=True))
        pair = ["lm_head.weight", "embed.weight"] if head_first else ["embed.weight", "lm_head.weight"]
        assert [n for n, _ in items] == ["steps", *pair, "block.weight", "block.bias"] == sync_names(model, tied_names=True)
        got = dict(items)
        assert torch.equal(got["lm_head.weight"], got["embed.weight"])
        assert torch.equal(got["embed.weight"], model.embed.weight.detach().to(torch.bfloat16))
