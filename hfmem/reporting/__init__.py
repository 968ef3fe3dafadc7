"""The report one model gets: its analysis, the estimates and fit matrix a Plan asks for, and their step times."""
