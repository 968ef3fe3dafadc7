"""`python -m hfmem` runs the CLI."""

from hfmem.cli import main

main()
