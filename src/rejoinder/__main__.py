"""``python -m rejoinder``: the same command line as the ``rejoinder`` script."""

from .cli import app

app(prog_name="rejoinder")
