"""Samples: the schema, ingestion into Lance (`samples` + `rejects`), and the synthetic video QA set."""

from evr1.data.ingest import IngestReport, ingest, read_rejects, read_samples
from evr1.data.schema import REJECTS_SCHEMA, SAMPLES_SCHEMA, Reject, Sample
from evr1.data.synth import SynthReport, make_synthetic
from evr1.data.validate import default_resolve_problem_type

__all__ = [
    "REJECTS_SCHEMA",
    "SAMPLES_SCHEMA",
    "IngestReport",
    "Reject",
    "Sample",
    "SynthReport",
    "default_resolve_problem_type",
    "ingest",
    "make_synthetic",
    "read_rejects",
    "read_samples",
]
