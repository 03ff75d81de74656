"""The `tokenrouter` command line: thin typer front end over trcore, trsim and trserve."""
