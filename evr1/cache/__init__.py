"""evr1.cache: the Lance `frames` cache (content-addressed keys, store, Ray builder, reader)."""

from evr1.cache.builder import CacheBuildReport, build_frame_cache
from evr1.cache.keys import content_hash, frame_key
from evr1.cache.reader import CacheMiss, FrameReader

__all__ = ["build_frame_cache", "CacheBuildReport", "FrameReader", "CacheMiss", "frame_key", "content_hash"]
