/*  config.c — durable store settings from a configuration file (shoal_config_durable).

    Akka's LMDB store reads shoal/cluster/distributed-data/durable/lmdb/{dir, map-size,
    write-behind-interval}; ddata's loader has already checked each value's form when the file
    loaded (a string, a positive size, a duration or off that fits write_behind_ms). What is left
    here is what the loader cannot know: that a directory must be named.

    Akka appends "-<system>-<replicator>-<port>" to a dir that ends in "ddata", so that several
    actor systems on one host do not share files. Shoal keeps one environment per node for every
    role's replicator and has no system name, so the directory is used as written; two nodes given
    the same directory are told apart by the lock (durable.h, ONE PROCESS PER DIRECTORY), which
    refuses the second one by name.

    Like the other fillers, this overwrites only what the file sets: the caller starts from
    shoal_durable_settings_default and the file changes what it names. A file that fails leaves
    *out as it was.
*/
#include "durable.h"

#include <stddef.h>
#include <stdint.h>

#define LMDB "shoal/cluster/distributed-data/durable/lmdb/"

int shoal_config_durable(const shoal_config_t *cfg, shoal_durable_settings_t *out, char *err,
                         size_t errlen)
{
    if (!cfg || !out)
        return shoal_config_error(err, errlen, "shoal_config_durable: NULL argument");
    shoal_durable_settings_t s = *out;
    const char *dir = shoal_config_get(cfg, LMDB "dir");
    if (dir && !dir[0])
        return shoal_config_error(err, errlen, "%s: empty: name the store's directory", LMDB "dir");
    if (dir)
        s.dir = dir; /* owned by cfg */
    int rc = shoal_config_size(cfg, LMDB "map-size", &s.map_size, err, errlen);
    uint64_t ms = 0;
    if (rc >= 0)
        rc = shoal_config_duration(cfg, LMDB "write-behind-interval", &ms, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        /* off is 0 (immediate writes); the loader bounds the row to write_behind_ms's type */
        s.write_behind_ms = (uint32_t)ms;
    }
    *out = s;
    if (err && errlen)
        err[0] = '\0';
    return 0;
}
