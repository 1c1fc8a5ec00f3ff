"""`python -m shardwright`: the command line."""

from shardwright.cli import entry

entry()
