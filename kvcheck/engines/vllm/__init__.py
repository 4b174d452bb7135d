"""vLLM behind the Engine interface (engine.py): its flags, launch line, boot log and server endpoints."""
