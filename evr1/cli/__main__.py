"""`python -m evr1.cli …` is the `evr1` command (and `evr1 run`'s flow process, `cli/interrupt.py`)."""

import sys

from evr1.cli import prefect_server

prefect_server.start_early(sys.argv[1:])  # the flow process: Prefect's server starts while the rest imports

from evr1.cli.main import app  # noqa: E402

app()
