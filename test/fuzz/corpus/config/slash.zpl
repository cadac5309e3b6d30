# one line per key
shoal/cluster/distributed-data/gossip-interval = 2 s
shoal/cluster/distributed-data/pruning-interval = off
shoal/cluster/distributed-data/delta-crdt/enabled = on
