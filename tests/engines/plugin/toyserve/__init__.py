"""ToyServe: a tiny serving engine that exists only to prove kvcheck's engine seam from outside.

Nothing under kvcheck/ names it. It registers through the `kvcheck.engines` entry-point group (the
dist-info folder beside this package, found when this folder is on sys.path), exactly as a team's
own engine package would.
"""
