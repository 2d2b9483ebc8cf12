"""A user module that fails while it is imported (for the loader's tests)."""

raise ValueError("the user's module is broken at import")
