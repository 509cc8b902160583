"""The way in (autograder/intake/): collecting hand-ins, late work, repairing notebooks, conventions of a source."""
