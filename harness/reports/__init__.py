"""Renderers of results: JSON (machine), terminal (people); more formats plug in here."""
