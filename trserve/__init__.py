"""Real driver of the trcore scheduler: vLLM-backed subservers, inter-model transport, HTTP front end."""
