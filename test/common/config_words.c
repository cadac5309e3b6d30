/*  config_words.c — see config_words.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "config_words.h"

#include <stdio.h>

shoal_config_t *parse_words(const char *text, char *why, size_t cap)
{
    int code = 1;
    shoal_config_t *cfg = shoal_config_parse(text, &code);
    if ((cfg != NULL) != (code == 0))
        fail_msg("shoal_config_parse: %p with code %d", (void *)cfg, code);
    snprintf(why, cap, "%s", cfg ? "" : shoal_last_error_detail());
    return cfg;
}

shoal_config_t *load_words(const char *path, char *why, size_t cap)
{
    int code = 1;
    shoal_config_t *cfg = shoal_config_load(path, &code);
    if ((cfg != NULL) != (code == 0))
        fail_msg("shoal_config_load: %p with code %d", (void *)cfg, code);
    snprintf(why, cap, "%s", cfg ? "" : shoal_last_error_detail());
    return cfg;
}
