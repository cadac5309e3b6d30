shoal
    cluster
        distributed-data
            gossip-interval = 2 parsecs
