"""Adapters that let agent frameworks keep their state in tether."""
