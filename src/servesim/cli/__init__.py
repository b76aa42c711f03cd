"""Command-line interface: thin Typer commands over servesim's public Python API."""
