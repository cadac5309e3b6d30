shoal
    cluster
        distributed-data
            expire-keys-after-inactivity = "cache-* = 2 minutes, 'k 1' = 30 s"
                key-1 = 10 minutes
            durable/keys = ["shard-*", "counters"]
