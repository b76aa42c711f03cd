"""servesim's version, importable without the rest of the package (the CLI's --version)."""

__version__ = "0.1.0"
