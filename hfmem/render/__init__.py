"""Turning a report into text: the terminal table, markdown, the pull-request comment and the config diff."""
