/* PLACEHOLDER — being written; replaced by the real implementation. */
#include "internal.h"
const shoal_type_t shoal_type_flag = {.name = "Flag", .tag = SHOAL_FLAG, .format_version = 1};
