"""`python -m evr1.cli …` is the `evr1` command."""

from evr1.cli.main import app

app()
