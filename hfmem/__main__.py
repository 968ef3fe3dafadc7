"""`python -m hfmem` runs the CLI."""

from hfmem.cli.main import main

main()
