"""Cluster metadata: records, the immutable image every process replays them into, and the store backends."""
