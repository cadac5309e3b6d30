shoal
    cluster
        down-removal-margin = 10 s
        sharding
            number-of-shards = 120
            role = "backend"
            remember-entities = on
            remember-entities-store = ddata
            passivation
                strategy = lru-with-idle
                default-strategy/active-entity-limit = 1000000
                lru-with-idle
                    active-entity-limit = 20000
                    idle-entity
                        timeout = 10 minutes
                        interval = 1 minute
                    replacement
                        policy = least-recently-used
                        least-recently-used/segmented/levels = 2
                        least-recently-used/segmented/proportions = [0.2, 0.8]
                    admission
                        window
                            policy = least-recently-used
                            optimizer = hill-climbing
                            hill-climbing/step-decay = 0.98
                        filter = frequency-sketch
                        frequency-sketch/counter-bits = 8
            least-shard-allocation-strategy
                rebalance-absolute-limit = 20
                rebalance-relative-limit = 0.1
            coordinator-state
                write-majority-plus = 3
                read-majority-plus = all
            coordinator-singleton
                singleton-name = coordinator
                use-lease = ""
            distributed-data
                majority-min-cap = 5
                durable/keys = ["shard-*"]
                prefer-oldest = on
            allocation-strategy = consistent-hashing
            consistent-hashing-allocation-strategy/rebalance-limit = 5
