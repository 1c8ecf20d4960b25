"""A helper module a kernel vendors in a folder of its own (``import_hooks/vendor``)."""
SCALE = 1.0
