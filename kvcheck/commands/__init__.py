"""One orchestration module per command: inputs -> targets -> backend -> measurements -> judge -> Report.

The CLI translates options into each module's Options value and calls its one entry function; nothing
below a command prints or exits.
"""
