/* PLACEHOLDER — being written; replaced by the real implementation. */
#include "internal.h"
const shoal_type_t shoal_type_pncounter = {.name = "PNCounter", .tag = SHOAL_PNCOUNTER, .format_version = 1};
