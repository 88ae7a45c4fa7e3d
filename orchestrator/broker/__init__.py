"""The broker agent: local log, RemoteLogManager, DisableRemoteTopic handling, registration and heartbeats."""
