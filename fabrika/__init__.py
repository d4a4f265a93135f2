"""fabrika: a synthetic-data factory for LLM post-training, Russian first."""

__version__ = "0.1.0"

__all__ = ["__version__"]
