/*  fuzz_config.c — libFuzzer target for configuration text (shoal_config_parse).

    Configuration files come from operators, not peers, but a node must still never crash on one:
    any input gives a config or an error message. A config that loads must fill the node and
    replicator settings, and what it fills must be consistent (counts with their arrays); cluster
    and sharding settings may refuse it, with a message.
*/
#include "ddata.h"
#include "durable.h"
#include "membership.h"
#include "sharding.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[256];
    err[0] = '\0';
    int code = 0;
    shoal_config_t *cfg = shoal_config_parse(text, &code);
    free(text); /* the config must not point into the text */
    if (!cfg) {
        if (code >= 0 || shoal_last_error_detail()[0] == '\0')
            abort(); /* every failure has a code and explains itself */
        return 0;
    }
    shoal_replicator_settings_t r;
    memset(&r, 0, sizeof r);
    if (shoal_config_replicator(cfg, &r, err, sizeof err) != 0)
        abort();
    size_t total = 0;
    if (r.role)
        total += strlen(r.role);
    for (size_t i = 0; i < r.n_durable_keys; i++)
        total += strlen(r.durable_keys[i]);
    for (size_t i = 0; i < r.n_expire_keys; i++)
        if (r.expire_keys[i].after_ms == 0 || !r.expire_keys[i].pattern[0])
            abort();
    shoal_system_settings_t s;
    memset(&s, 0, sizeof s);
    s.endpoint = "tcp://127.0.0.1:1";
    if (shoal_config_system(cfg, &s, err, sizeof err) != 0 || !s.endpoint)
        abort();
    total += strlen(s.endpoint);
    /* cluster settings may be refused as a whole (a strategy without what it needs), with a
       message; when they load, every list is consistent */
    shoal_cluster_settings_t c;
    shoal_cluster_settings_default(&c);
    err[0] = '\0';
    if (shoal_config_cluster(cfg, &c, err, sizeof err) != 0) {
        if (err[0] == '\0')
            abort();
    } else {
        for (size_t i = 0; i < c.n_seed_nodes; i++)
            total += strlen(c.seed_nodes[i]);
        for (size_t i = 0; i < c.n_roles; i++)
            total += strlen(c.roles[i]);
        for (size_t i = 0; i < c.n_role_min; i++)
            total += strlen(c.role_min[i].role);
        total += strlen(c.app_version);
    }
    /* sharding: "all" and the passivation checks are parsed here, not at load */
    shoal_sharding_settings_t sh;
    memset(&sh, 0, sizeof sh);
    sh.role = "";
    sh.number_of_shards = 1; /* a file may change these, never to 0 */
    sh.buffer_size = 1;
    err[0] = '\0';
    if (shoal_config_sharding(cfg, &sh, err, sizeof err) != 0) {
        if (err[0] == '\0')
            abort();
    } else {
        if (!sh.role || sh.number_of_shards == 0 || sh.buffer_size == 0)
            abort();
        if (sh.allocation.rebalance_relative_limit > 1 ||
            sh.allocation.rebalance_relative_limit < 0)
            abort();
        total += strlen(sh.role);
        /* sharding's replicator settings, when the file made them, are complete */
        const shoal_replicator_settings_t *rs = sh.replicator_settings;
        if (rs && ((rs->n_durable_keys && !rs->durable_keys) ||
                   (rs->n_expire_keys && !rs->expire_keys) || !rs->max_delta_elements))
            abort();
        for (size_t i = 0; rs && i < rs->n_durable_keys; i++)
            total += strlen(rs->durable_keys[i]);
        if (sh.passivation.slru_levels > 4)
            abort();
    }
    /* the LMDB store's: a directory named, never empty */
    shoal_durable_settings_t du;
    shoal_durable_settings_default(&du);
    err[0] = '\0';
    if (shoal_config_durable(cfg, &du, err, sizeof err) != 0) {
        if (err[0] == '\0')
            abort();
    } else if ((du.dir && !du.dir[0]) || du.map_size == 0) {
        abort();
    }
    shoal_config_destroy(&cfg);
    return total == (size_t)-1; /* keeps the reads from being optimized away */
}
