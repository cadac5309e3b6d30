shoal
    cluster
        role
            backend.min-nr-of-members = 2
        failure-detector
            threshold = 8.
