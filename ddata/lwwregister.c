/* PLACEHOLDER — being written; replaced by the real implementation. */
#include "internal.h"
const shoal_type_t shoal_type_lwwregister = {.name = "LWWRegister", .tag = SHOAL_LWWREGISTER, .format_version = 1};
