"""The command line: one thin module per verb. Nothing imports this package."""
