"""The vocabulary every layer shares: the run configuration and its fields, the workloads' size
fields, the run folder's schema, error classes and progress reports. Imports nothing above it."""
