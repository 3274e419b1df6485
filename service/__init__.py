"""tierlog service package."""
