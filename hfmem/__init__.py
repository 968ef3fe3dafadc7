"""hfmem: will this Hugging Face model train here, and how?"""

__version__ = "0.1.0"
