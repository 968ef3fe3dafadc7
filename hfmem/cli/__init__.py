"""The hfmem command line."""
