/*  shoal-keygen — makes a node's or a client's CURVE key pair (czmq's zcert format).

      shoal-keygen DIR [--name NAME] [--endpoint tcp://HOST:PORT] [--force]

    Writes DIR/NAME.cert (the public certificate: copy it into the allow-list directory of every
    member) and DIR/NAME.cert_secret (readable by its owner only: give DIR/NAME.cert as the node's
    curve_cert, or SHOAL_CURVE_CERT). --endpoint records where the node listens in the public
    certificate, which is how other members (and clients) find the server key of a seed they have
    never met. NAME defaults to "node". DIR is made with its parents (mode 0700 for those it
    makes). Prints where the two files went and the public key (Z85), each line labelled. Refuses
    to overwrite an existing key pair unless --force. --help prints the usage, --version
    "shoal-keygen VERSION".

    Exit codes: 0 written; 1 cannot write; 2 usage.
*/
#include "cli.h"

#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: shoal-keygen DIR [--name NAME] [--endpoint tcp://HOST:PORT] [--force]\n"
               "       shoal-keygen --help | --version\n"
               "Writes DIR/NAME.cert (public) and DIR/NAME.cert_secret (mode 0600); NAME defaults\n"
               "to node. DIR and its parents are made when missing.\n");
}

/* mkdir -p: every missing component of `dir` with mode 0700; 0, or -1 with errno. */
static int make_dirs(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return -1;
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *name = "node", *endpoint = NULL;
    bool force = false;
    int cli = cli_help_or_version(&argc, argv, "shoal-keygen", usage);
    if (cli >= 0)
        return cli;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
            name = argv[++i];
        else if (strcmp(argv[i], "--endpoint") == 0 && i + 1 < argc)
            endpoint = argv[++i];
        else if (strcmp(argv[i], "--force") == 0)
            force = true;
        else if (argv[i][0] == '-')
            return cli_refuse(usage, "shoal-keygen: unknown option or missing value: '%s'",
                              argv[i]);
        else if (dir)
            return cli_refuse(usage, "shoal-keygen: one directory only ('%s', then '%s')", dir,
                              argv[i]);
        else
            dir = argv[i];
    }
    if (!dir)
        return cli_refuse(usage, "shoal-keygen: no directory given");
    if (!name[0] || strchr(name, '/'))
        return cli_refuse(usage, "shoal-keygen: --name must be a non-empty file name, not '%s'",
                          name);
    if (endpoint && strncmp(endpoint, "tcp://", 6) != 0 && strncmp(endpoint, "ipc://", 6) != 0) {
        fprintf(stderr, "shoal-keygen: --endpoint must be tcp://HOST:PORT or ipc://PATH\n");
        return 2;
    }
    zsys_handler_set(NULL);
    if (make_dirs(dir) != 0) {
        fprintf(stderr, "shoal-keygen: cannot make %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char pub[4096], sec[4096 + 8];
    snprintf(pub, sizeof pub, "%s/%s.cert", dir, name);
    snprintf(sec, sizeof sec, "%s_secret", pub);
    if (!force && (access(pub, F_OK) == 0 || access(sec, F_OK) == 0)) {
        fprintf(stderr, "shoal-keygen: %s already exists (--force replaces it)\n", pub);
        return 1;
    }
    zcert_t *cert = zcert_new();
    if (!cert) {
        fprintf(stderr, "shoal-keygen: cannot make a key pair (libsodium?)\n");
        return 1;
    }
    zcert_set_meta(cert, "name", "%s", name);
    if (endpoint)
        zcert_set_meta(cert, "endpoint", "%s", endpoint);
    /* zcert_save writes the secret file with mode 0600 and the public one beside it */
    if (zcert_save(cert, pub) != 0) {
        fprintf(stderr, "shoal-keygen: cannot write %s: %s\n", pub, strerror(errno));
        zcert_destroy(&cert);
        return 1;
    }
    chmod(sec, 0600);
    printf("public certificate: %s\nsecret certificate: %s\npublic key: %s\n", pub, sec,
           zcert_public_txt(cert));
    zcert_destroy(&cert);
    return 0;
}
