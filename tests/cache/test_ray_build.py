"""A parallel cache build on a real local Ray instance (2 workers) matches the serial build."""

from __future__ import annotations

import os

import numpy as np
import pytest

from evr1.cache import build_frame_cache, content_hash, frame_key
from evr1.cache.store import read_clip
from evr1.cluster.local import start_local
from evr1.video import FrameParams

ray = pytest.importorskip("ray")
PARAMS = FrameParams(factor=28)


@pytest.fixture(scope="module")
def local_ray():
    """One small local Ray per module, with the small-machine settings (stack-feasibility §7).

    Reuses a session-wide instance when another test started one, and then leaves it running."""
    started = not ray.is_initialized()
    if started:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        # As evr1 starts one: tied to this process (no orphans, no /tmp/ray-* left), no fork warning.
        start_local(num_cpus=2, include_dashboard=False, object_store_memory=256 << 20, logging_level="WARNING")
    yield
    if started:
        ray.shutdown()


def test_ray_build_matches_serial(local_ray, media, tmp_path):
    items = [("clip", str(media["clip"]), "video"), ("long", str(media["long"]), "video"),
             ("vfr", str(media["vfr"]), "video"), ("img", str(media["image"]), "image"),
             ("bad", str(media["truncated"]), "video"), ("audio", str(media["audio_only"]), "video")]
    parallel = build_frame_cache(items, str(tmp_path / "ray.lance"), PARAMS, workers=2, progress=False)
    serial = build_frame_cache(items, str(tmp_path / "serial.lance"), PARAMS, workers=0, progress=False)
    assert ray.is_initialized()  # the builder reused our instance and left it running
    assert (parallel.decoded, parallel.failed) == (serial.decoded, serial.failed) == (4, 2)
    assert {r["record_id"]: r["kind"] for r in parallel.rejects} == {"bad": "corrupt", "audio": "no_video_stream"}
    for record_id, path, kind in items[:4]:
        key = frame_key(content_hash(path), PARAMS, kind)
        a, b = read_clip(str(tmp_path / "ray.lance"), key), read_clip(str(tmp_path / "serial.lance"), key)
        assert np.array_equal(a.frames, b.frames) and a.frame_indices == b.frame_indices, record_id


def test_ray_timeout_cancels(local_ray, media, tmp_path):
    report = build_frame_cache([("long", str(media["long"]), "video")], str(tmp_path / "t.lance"), PARAMS,
                               workers=2, timeout_s=1e-6, progress=False)
    assert report.decoded == 0 and report.rejects[0]["kind"] == "timeout"


def test_ray_workers_write_fragments_driver_commits(local_ray, media, tmp_path):
    """Workers write fragments, the driver commits them in batches; a kill after the first commit keeps it."""
    import lance

    uri = str(tmp_path / "frames.lance")
    items = [(name, str(media[name]), "video") for name in ("clip", "long", "vfr", "bframes", "long_gop")]
    versions = []

    class Killed(Exception):
        pass

    def die(version):
        versions.append(version)
        raise Killed

    with pytest.raises(Killed):
        build_frame_cache(items, uri, PARAMS, workers=2, progress=False, commit_rows=2, on_commit=die)
    # Version 1 is the empty table; the first commit appended exactly the 2 finished fragments.
    assert versions == [2] and lance.dataset(uri).count_rows() == 2
    resumed = build_frame_cache(items, uri, PARAMS, workers=2, progress=False, commit_rows=2)
    assert (resumed.hits, resumed.decoded, resumed.failed) == (2, 3, 0)
    ds = lance.dataset(uri)
    # 3 decodes in commits of ≤ 2: two more versions; every key once.
    assert ds.count_rows() == 5 and ds.version == 4
    assert len(set(ds.to_table(columns=["key"]).column("key").to_pylist())) == 5
