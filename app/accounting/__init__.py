"""Cost and token accounting for completed requests."""
