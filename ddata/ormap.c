/* PLACEHOLDER — being written; replaced by the real implementation. */
#include "internal.h"
const shoal_type_t shoal_type_ormap = {.name = "ORMap", .tag = SHOAL_ORMAP, .format_version = 1};
const shoal_type_t shoal_type_ormultimap = {.name = "ORMultiMap", .tag = SHOAL_ORMULTIMAP, .format_version = 1};
const shoal_type_t shoal_type_lwwmap = {.name = "LWWMap", .tag = SHOAL_LWWMAP, .format_version = 1};
const shoal_type_t shoal_type_pncountermap = {.name = "PNCounterMap", .tag = SHOAL_PNCOUNTERMAP, .format_version = 1};
const shoal_type_t shoal_type_ormap_delta = {.name = "ORMapDelta", .tag = SHOAL_ORMAP_DELTA, .format_version = 1};
