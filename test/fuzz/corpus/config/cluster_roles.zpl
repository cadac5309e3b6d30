shoal
    cluster
        seed-nodes = "tcp://127.0.0.1:2551, tcp://[::1]:2552"
        roles = ["backend", 'web-2']
        role
            backend
                min-nr-of-members = 2
        role/web-2/min-nr-of-members = 0
        min-nr-of-members = 3
        allow-weakly-up-members = on
        split-brain-resolver
            active-strategy = keep-oldest
            down-all-when-unstable = off
            keep-oldest/role = backend
            keep-oldest/down-if-alone = yes
