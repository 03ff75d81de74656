"""One module per command group; heavy imports stay inside the command functions."""
