/*  shardprocs.h — what test/cluster/prog_shard (a sharding member in its own process) and the
    tests that start it (test/cluster/test_sharding_procs.c) agree on.

    COMMANDS. The test drives a member through client requests of kind SHARDPROCS_KIND_CMD
    (clients are never subject to the transport's faults, so a member cut off by a partition can
    still be asked what it sees). The request is one line of text, the reply text:
      view                  "self <id> <status> <may act 0|1>", "leader <id>|-",
                            "converged 0|1", then "member <id> <port> <status> <up number>
                            <reachable 0|1>" per member (statuses as shoal_member_status_t)
      healthy               "1" once the region registered with its coordinator, else "0"
      ask <ms> <eid>...     asks every entity "ping" at once (timeout ms each); one line per
                            entity in order: "<eid> ok <pid> <port> <count>" or "<eid> err <code>"
      tell <eid>...         tells every entity "inc"; "ok <accepted> <refused>"
      state                 "shard <id> <entities>" per shard hosted here
      stats                 "<counter> <value>" per line (shoal_region_stats_t names, and
                            "stopping": entities told to stop that have not stopped yet)
      cut <port>...         cuts this node from the nodes at those ports (both directions)
      heal                  removes every fault
    Unknown or malformed commands answer "err <text>".

    EVENTS. Every member appends one line per entity start and stop to the shared events file
    (O_APPEND, one write per line): "<CLOCK_MONOTONIC ns> <pid> start|stop <eid> <shard>". The
    test appends "<ns> <pid> end" when a member died (SIGKILL, or exit noticed), which closes
    that member's open intervals. CLOCK_MONOTONIC is one clock for every process of a Linux
    machine, so lines of different processes compare.
*/
#ifndef SHOAL_TEST_SHARDPROCS_H
#define SHOAL_TEST_SHARDPROCS_H

#define SHARDPROCS_KIND_CMD 0x8e01u
#define SHARDPROCS_TYPE "counter"
#define SHARDPROCS_STOP_MSG "stop"

#endif
