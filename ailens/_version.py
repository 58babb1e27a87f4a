"""The package version (a leaf module: the recorder writes it into every trace header)."""

__version__ = "0.1.0"
