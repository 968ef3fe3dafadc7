"""hfmem: will this Hugging Face model train here, and how?

The library API is `hfmem.estimate`, `hfmem.fit`, `hfmem.serve`, `hfmem.report` and `hfmem.analyse_model`
(hfmem/api.py),
imported on first use so that `import hfmem` (and the CLI's fast paths) stay light.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "analyse_model", "estimate", "fit", "report", "serve"]


def __getattr__(name: str) -> Any:
    """The API functions, loaded from hfmem.api when first asked for."""
    if name in __all__:
        from hfmem import api

        return getattr(api, name)
    raise AttributeError(f"module 'hfmem' has no attribute {name!r}")
