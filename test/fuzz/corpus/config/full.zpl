#   Every key Shoal reads, set to something other than the defaults
shoal
    remote
        artery
            canonical
                hostname = "192.168.1.20"
                port = 2553
            advanced
                maximum-frame-size = 512 KiB
                outbound-message-queue-size = 3072
    cluster
        distributed-data
            name = ddataReplicator           # ignored
            role = "backend"
            gossip-interval = 3 s
            notify-subscribers-interval = 250ms
            log-data-size-exceeding = 10 KiB
            max-delta-elements = 5
            use-dispatcher = "pekko.actor.internal-dispatcher"
            pruning-interval = 90 s
            max-pruning-dissemination = 10 minutes
            pruning-marker-time-to-live = 12 h
            serializer-cache-time-to-live = 10s
            prefer-oldest = on
            delta-crdt
                enabled = off
                max-delta-size = 40
            expire-keys-after-inactivity
                key-1 = 10 minutes
                session = 1 h
            durable
                keys = "shard-*, counters"
                pruning-marker-time-to-live = 10 d
                store-actor-class = org.apache.pekko.cluster.ddata.LmdbDurableStore
                use-dispatcher = pekko.cluster.distributed-data.durable.pinned-store
                pinned-store
                    executor = thread-pool-executor
                    type = PinnedDispatcher
                lmdb
                    dir = "ddata"
                    map-size = 100 MiB
                    write-behind-interval = off
            delta-interval = 200 ms
            tombstone-time-to-live = 2 d
            compress-above = 64 KiB
            max-reassembly-size = 16 MiB
            max-pending-operations = 5000
