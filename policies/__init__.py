"""Disablement policies (retain, delete), retention expiry and orphan reclaim: pure planners plus thin executors."""
