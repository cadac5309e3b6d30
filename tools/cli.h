/*  cli.h — the two flags every Shoal program answers the same way, tools, examples and the chaos
    programs alike:

      --help, -h    the usage on stdout, exit 0
      --version     one line "NAME VERSION" on stdout (SHOAL_VERSION, from ddata.h), exit 0

    A usage error is each program's own: the usage on stderr, exit 2. Header-only, because the
    programs are single files and the library has no business printing usage.

      int main(int argc, char **argv)
      {
          int cli = cli_help_or_version(argc, argv, "kvstore", usage);
          if (cli >= 0)
              return cli;
          ...
*/
#ifndef SHOAL_CLI_H
#define SHOAL_CLI_H

#include <stdio.h>
#include <string.h>

#include "ddata.h"

/* Either flag anywhere before a "--" (none of the programs takes a value that starts with "--help"
   or "--version"): prints what it asks for and returns 0, the exit code. -1 when neither is given.
   `usage` writes the program's usage to the stream it is given. */
static inline int cli_help_or_version(int argc, char **argv, const char *name,
                                      void (*usage)(FILE *))
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("%s %s\n", name, SHOAL_VERSION);
            return 0;
        }
    }
    return -1;
}

/* A usage error: the usage on stderr; returns 2, the exit code. */
static inline int cli_usage_error(void (*usage)(FILE *))
{
    usage(stderr);
    return 2;
}

#endif
