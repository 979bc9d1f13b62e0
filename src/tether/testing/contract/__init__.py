"""The Store protocol's contract, one module per capability: every check takes a fresh, empty store
(the ``store`` fixture) and holds on every backend, except a check marked with an optional
capability the backend lacks."""
