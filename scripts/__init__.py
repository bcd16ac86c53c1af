"""Scripts run from the checkout (`python scripts/<name>.py`); a package so tests can import them."""
