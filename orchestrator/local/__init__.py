"""The local cluster: every process of a tieredctl cluster on one machine, under one directory."""
