/*  fuzz_heartbeat.c — libFuzzer target for the heartbeat wire (membership/heartbeat.h), which
    the heartbeat actor decodes from any peer that reaches its socket.

    Whatever decodes must encode back to bytes that decode to the same fields; and since the
    layout is fixed, those bytes must be the input itself.
*/
#include "heartbeat.h"

#include <stdlib.h>
#include <string.h>

static bool same_str(const char *a, size_t al, const char *b, size_t bl)
{
    return al == bl && (al == 0 || memcmp(a, b, al) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hb_msg_t m, m2;
    if (hb_decode(data, size, &m) != 0)
        return 0;
    if (m.type < HB_PING || m.type > HB_PROBE_ACK || m.a_len > 255 || m.b_len > 255 ||
        (m.a_len && !m.a) || (m.b_len && !m.b) || m.c_len > 255 || (m.c_len && !m.c))
        abort();
    uint8_t buf[600];
    size_t n = hb_encode(&m, buf, sizeof buf);
    if (n == 0 || hb_decode(buf, n, &m2) != 0)
        abort();
    if (m.type != m2.type || m.seq != m2.seq || m.ok != m2.ok ||
        !same_str(m.a, m.a_len, m2.a, m2.a_len) || !same_str(m.b, m.b_len, m2.b, m2.b_len) ||
        !same_str(m.c, m.c_len, m2.c, m2.c_len))
        abort();
    if (n != size || memcmp(buf, data, n) != 0)
        abort();
    /* a buffer one byte short is refused, never overrun */
    if (hb_encode(&m, buf, n - 1) != 0)
        abort();
    return 0;
}
