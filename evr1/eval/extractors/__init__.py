"""Answer extractors, one module per lineage of official code (each documents its source and fixes)."""
