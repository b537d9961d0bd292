"""CLI commands of this subpackage (registered on the main typer app)."""

import typer


def register(app: typer.Typer) -> None:
    """Add this subpackage's commands to ``app``."""
