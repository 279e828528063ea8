"""The script pipeline of `ferry check -- COMMAND`: the user's own training command, run unchanged on each side.

Module map, in reading order: ``environment`` (the child environments that make a script's own device
detection find each device) -> ``recorder`` (installed in every process of the command at ``import
torch``; what it records, typed) -> ``folder`` (the script's folder between runs: each run starts from the
user's files) -> ``runner`` (the pipeline: runs the children, hands their records to the result modules of
check/, which judge them beside the worker pipeline's results). Nothing outside
this package and check/command.py imports it (import-linter).
"""
