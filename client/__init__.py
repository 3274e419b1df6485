"""tierlog client package."""
