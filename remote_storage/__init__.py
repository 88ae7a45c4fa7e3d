"""Remote storage: the object key layout, the S3 RemoteStorageManager, the RLMM, inventory and the Spark scan."""
