"""The command line: argument parsing, progress bars and the commands."""
