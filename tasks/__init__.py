"""Prefect tasks: one thin wrapper per stage around `evr1.pipeline`; each returns a small `StageResult`."""
