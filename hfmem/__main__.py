"""`python -m hfmem` runs the CLI, through the entry point that catches Ctrl-C from the start."""

from hfmem.entry import hfmem

hfmem()
