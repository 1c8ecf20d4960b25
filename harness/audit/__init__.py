"""``harness audit``: which bug classes a matrix is blind to.

``operators``: the mutation operators as data.  ``coverage``: the boundary
conditions a matrix exercises, from its cases alone.  ``kill``: the kill matrix,
the score and each survivor's reason.  ``session``: one audit, run.
"""
