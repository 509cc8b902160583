"""The commands (autograder/commands/) as instructors type them, and other nbgrader courses graded through them."""
