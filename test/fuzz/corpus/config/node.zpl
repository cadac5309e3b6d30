shoal
    remote
        artery
            canonical
                hostname = "::1"
                port = 2552
            advanced
                maximum-frame-size = 256 KiB
