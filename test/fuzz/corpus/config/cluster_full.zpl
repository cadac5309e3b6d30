#   Every cluster key, none at its default
shoal
    cluster
        seed-nodes = ["tcp://10.0.0.1:2552", "tcp://10.0.0.2:2553"]
        seed-node-timeout = 3 s
        retry-unsuccessful-join-after = 4s
        shutdown-after-unsuccessful-join-seed-nodes = 30 s
        downing-provider-class = org.apache.pekko.cluster.sbr.SplitBrainResolverProvider
        allow-weakly-up-members = 9 s
        roles = "backend, frontend"
        role
            backend
                min-nr-of-members = 2
            frontend
                min-nr-of-members = 3
        app-version = "1.2.3"
        min-nr-of-members = 4
        gossip-interval = 500 ms
        gossip-time-to-live = 5 s
        leader-actions-interval = 750ms
        gossip-different-view-probability = 0.5
        reduce-gossip-different-view-probability = 200
        failure-detector
            implementation-class = org.apache.pekko.remote.PhiAccrualFailureDetector
            heartbeat-interval = 2 s
            threshold = 12.5
            max-sample-size = 200
            min-std-deviation = 150 ms
            acceptable-heartbeat-pause = 6 s
            monitored-by-nr-of-members = 7
            expected-response-after = 3 s
            indirect-probes = 2
            loop-stall-bound = 1 minute
            heartbeat-endpoint = "tcp://10.0.0.1:3000"
        split-brain-resolver
            active-strategy = static-quorum
            stable-after = 30 s
            down-all-when-unstable = 12 s
            static-quorum
                quorum-size = 3
                role = "backend"
            keep-majority
                role = "km-role"
            keep-oldest
                down-if-alone = off
                role = "ko-role"
    coordinated-shutdown
        default-phase-timeout = 8 s
