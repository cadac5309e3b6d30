shoal
    cluster
        gossip-different-view-probability = 1.0
        reduce-gossip-different-view-probability = 0
        shutdown-after-unsuccessful-join-seed-nodes = off
        failure-detector/threshold = 0.000001
        failure-detector/acceptable-heartbeat-pause = 0 s
        failure-detector/heartbeat-endpoint = ""
        split-brain-resolver/active-strategy = static-quorum
        split-brain-resolver/static-quorum/quorum-size = 1
        split-brain-resolver/down-all-when-unstable = on
        split-brain-resolver/stable-after = 0ms
    coordinated-shutdown/default-phase-timeout = 10 seconds
