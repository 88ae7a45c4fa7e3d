"""Shared fixtures. Every server a test starts binds 127.0.0.1 on a free port and is stopped by pid."""
