"""The `evr1` command (`main`), the local UI services (`services`) and the worker image's smoke check
(`smoke`). The top floor: the only evr1 package that may import `flows/`."""
