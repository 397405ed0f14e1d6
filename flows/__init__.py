"""Prefect flows: `train_and_eval` (the whole DAG), `nightly_eval`, and one flow per stage."""
