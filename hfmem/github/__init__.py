"""The GitHub Action: its entry point, the REST client and the pull request's changed configs."""
