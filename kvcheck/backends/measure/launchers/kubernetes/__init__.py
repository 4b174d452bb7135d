"""The Kubernetes launcher: each role runs as a Job (one node) or a LeaderWorkerSet (several nodes).

`render.py` turns a role into objects (also what `--dry-run` prints), `api.py` is the one place that
talks to the API server (through the `kubernetes` client, an optional extra), `launcher.py` runs the
objects and reads the engine's log and `/server_info` through the API server, `cleanup.py` deletes
what a killed run left. docs/measure.md ("Kubernetes") says what is created and what it needs.
"""
