"""servesim: simulate vLLM-style LLM serving without a GPU."""

__version__ = "0.1.0"
