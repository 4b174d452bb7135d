"""Everything kvcheck knows about SGLang: flags, command line, logs, server answers."""
