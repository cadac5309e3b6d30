/* PLACEHOLDER — being written; replaced by the real implementation. */
#include "internal.h"
const shoal_type_t shoal_type_gset = {.name = "GSet", .tag = SHOAL_GSET, .format_version = 1};
