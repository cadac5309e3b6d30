/* PLACEHOLDER — being written; replaced by the real implementation. */
#include "internal.h"
const shoal_type_t shoal_type_orset = {.name = "ORSet", .tag = SHOAL_ORSET, .format_version = 1};
const shoal_type_t shoal_type_orset_delta = {.name = "ORSetDelta", .tag = SHOAL_ORSET_DELTA, .format_version = 1};
