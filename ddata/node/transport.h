/*  transport.h — private to ddata/: the node transport's wire format, without sockets.

    Every frame (one ZeroMQ message) starts with two bytes:
        0xA0 | wire version      (magic nibble, so stray bytes are rejected at once)
        frame type               (shoal_ft_t)
    followed by a body that depends on the type:
        HELLO, HELLO_REPLY  a protobuf message of proto/transport.proto (rare, so evolvable)
        DATA                varint first_seq, then records: varint kind, varint length, bytes.
                            Record i carries sequence number first_seq + i: sequence numbers count
                            messages, not frames, so a receiver knows exactly how many messages
                            a gap lost and a sender how many were never acknowledged.
        ACK                 varint seq: every message up to seq was received (or given up)
        WHO                 empty: "I have no handshake for you" (a restarted or new ROUTER)
        REQUEST             varint request_id, varint kind, then the request bytes (client only)
        REPLY               varint request_id, varint kind, varint status (0 or -SHOAL_E*), bytes
        REPLY_PART          varint request_id, varint kind, varint total, varint offset, bytes:
                            one piece of a reply too large for one frame (client only). The
                            pieces of a reply go in order on its connection, each starting where
                            the one before ended; the reply is whole when offset + bytes reaches
                            total. Only a client that said in its Hello how large a reply it
                            reassembles (max_reply_bytes) is sent parts; to any other client a
                            reply over the frame limit is a REPLY with status SHOAL_ETOOBIG, as is
                            a reply over the size the client said. Errors always fit one REPLY.

    Parsers take untrusted bytes and never crash, assert or read past `len`: they are what
    test/fuzz/fuzz_frame.c feeds. The socket side lives in system.c and client.c.
*/
#ifndef SHOAL_TRANSPORT_H
#define SHOAL_TRANSPORT_H

#include "internal.h"

#define SHOAL_WIRE_MAGIC       0xA0u
#define SHOAL_WIRE_VERSION_MIN 1u
#define SHOAL_WIRE_VERSION_MAX 1u
/* Bytes reserved in front of a batch for its header: magic, type, a 10-byte varint. */
#define SHOAL_FRAME_HEADER_MAX 12u
/* Longest endpoint string accepted in a handshake. */
#define SHOAL_ENDPOINT_MAX 256u

typedef enum {
    SHOAL_FT_HELLO = 1,
    SHOAL_FT_HELLO_REPLY = 2,
    SHOAL_FT_DATA = 3,
    SHOAL_FT_ACK = 4,
    SHOAL_FT_WHO = 5,
    SHOAL_FT_REQUEST = 6,
    SHOAL_FT_REPLY = 7,
    SHOAL_FT_REPLY_PART = 8,
} shoal_ft_t;

/* ---------------------------------------------------------------------------------------------
 * Varints (LEB128, at most 10 bytes).
 */
/* shoal_varint_put and shoal_varint_len are in internal.h (the encoders share them). Reads a varint at *p (not past end) and advances *p. SHOAL_EDECODE when truncated or longer
   than 64 bits. */
int shoal_varint_get(const uint8_t **p, const uint8_t *end, uint64_t *v);

/* ---------------------------------------------------------------------------------------------
 * Frames.
 */
typedef struct {
    uint8_t version;
    uint8_t type; /* shoal_ft_t */
    const uint8_t *body;
    size_t body_len;
} shoal_frame_t;

/* Checks the magic, the version (SHOAL_WIRE_VERSION_MIN..MAX) and the type. SHOAL_EDECODE for a
   frame that is not ours, SHOAL_EVERSION for a version this build does not speak. */
int shoal_frame_parse(const uint8_t *data, size_t len, shoal_frame_t *f);

/* Appends a frame of `type` with an empty body (WHO). */
void shoal_frame_write_empty(shoal_buf_t *out, uint8_t version, shoal_ft_t type);

/* ---------------------------------------------------------------------------------------------
 * DATA frames: a batch of records.
 */
typedef struct {
    shoal_buf_t buf;    /* SHOAL_FRAME_HEADER_MAX reserved bytes, then the records */
    size_t count;       /* records in the batch */
    uint64_t first_seq; /* sequence number of the first record */
} shoal_batch_t;

/* Bytes a record of this kind and length adds to a frame. */
size_t shoal_record_size(uint16_t kind, size_t len);
/* Largest frame a batch with `records` bytes of records can make. */
static inline size_t shoal_batch_frame_max(size_t records)
{
    return SHOAL_FRAME_HEADER_MAX + records;
}
/* Bytes of records in the batch. */
static inline size_t shoal_batch_records(const shoal_batch_t *b)
{
    return b->buf.len ? b->buf.len - SHOAL_FRAME_HEADER_MAX : 0;
}
/* Appends a record; the first record of an empty batch takes sequence number `seq`. */
void shoal_batch_append(shoal_batch_t *b, uint64_t seq, uint16_t kind, const void *data,
                        size_t len);
/* Writes the header in front of the records and returns the frame (inside b->buf). The batch
   must not be empty. */
const uint8_t *shoal_batch_seal(shoal_batch_t *b, uint8_t version, size_t *len);
/* Empties the batch, keeping its memory. */
void shoal_batch_reset(shoal_batch_t *b);
void shoal_batch_free(shoal_batch_t *b);

typedef struct {
    uint64_t first_seq;
    size_t count; /* records, all validated by shoal_data_open */
    const uint8_t *p, *end;
} shoal_data_reader_t;

/* Validates a whole DATA frame (every record well formed, at least one, kinds <= 0xffff,
   first_seq > 0 and no sequence overflow) before anything is dispatched: a frame is taken whole
   or dropped whole. */
int shoal_data_open(const shoal_frame_t *f, shoal_data_reader_t *r);
/* Next record of a validated frame: 1 with a record, 0 at the end. */
int shoal_data_next(shoal_data_reader_t *r, uint16_t *kind, const uint8_t **data, size_t *len);

/* ---------------------------------------------------------------------------------------------
 * Receiver-side sequence accounting of one connection (pure, so it is unit-tested and fuzzed).
 * `expected` is the next sequence number the connection expects (starts at 1).
 */
typedef struct {
    uint64_t skip;   /* leading records of the frame already seen: drop them (duplicates) */
    uint64_t missed; /* messages between what was expected and the frame's first record (gap) */
} shoal_seq_verdict_t;
/* Accounts a frame of `count` records starting at `first`; advances *expected past it. */
shoal_seq_verdict_t shoal_seq_accept(uint64_t *expected, uint64_t first, uint64_t count);

/* ---------------------------------------------------------------------------------------------
 * Small control frames.
 */
void shoal_ack_write(shoal_buf_t *out, uint8_t version, uint64_t seq);
int shoal_ack_parse(const shoal_frame_t *f, uint64_t *seq);

void shoal_request_write(shoal_buf_t *out, uint8_t version, uint64_t request_id, uint16_t kind,
                         const void *data, size_t len);
int shoal_request_parse(const shoal_frame_t *f, uint64_t *request_id, uint16_t *kind,
                        const uint8_t **data, size_t *len);
/* Header bytes of a REQUEST or REPLY frame at most (the frame is this plus the payload). */
#define SHOAL_REQUEST_HEADER_MAX (2u + 10u + 3u + 5u)

/* status: 0, or a negative SHOAL_E* code the requester gets back. */
void shoal_reply_write(shoal_buf_t *out, uint8_t version, uint64_t request_id, uint16_t kind,
                       int status, const void *data, size_t len);
int shoal_reply_parse(const shoal_frame_t *f, uint64_t *request_id, uint16_t *kind, int *status,
                      const uint8_t **data, size_t *len);

/* Header bytes of a REPLY_PART frame at most: magic, type, id, kind, total and offset. */
#define SHOAL_REPLY_PART_HEADER_MAX (2u + 10u + 3u + 10u + 10u)
/* The reply size a client reassembles unless told otherwise (the replicator's default
   max_reassembly_bytes), and the most it may ask for. */
#define SHOAL_REPLY_MAX_DEFAULT ((uint64_t)64 << 20)
#define SHOAL_REPLY_MAX_LIMIT   ((uint64_t)1 << 30)
/* One piece of a reply of `total` bytes: `len` bytes (at least one) at `offset`. */
void shoal_reply_part_write(shoal_buf_t *out, uint8_t version, uint64_t request_id, uint16_t kind,
                            uint64_t total, uint64_t offset, const void *data, size_t len);
/* Validates: kind <= 0xffff, at least one byte, offset + bytes <= total. */
int shoal_reply_part_parse(const shoal_frame_t *f, uint64_t *request_id, uint16_t *kind,
                           uint64_t *total, uint64_t *offset, const uint8_t **data, size_t *len);

/* ---------------------------------------------------------------------------------------------
 * Handshake (protobuf bodies, proto/transport.proto).
 */
/* Node ids travel as validated strings: the parser does not intern them, so bytes from the
   network grow nothing until the node decides to accept the handshake. "" means none. */
typedef struct {
    uint32_t version_min, version_max;
    bool client;
    char from[SHOAL_NODE_ID_MAX + 1];    /* the sender ("" for a client) */
    char to_node[SHOAL_NODE_ID_MAX + 1]; /* who the sender believes it reaches, or "" */
    char to[SHOAL_ENDPOINT_MAX + 1];
    uint64_t first_seq; /* >= 1 */
    uint64_t max_reply_bytes; /* client: largest reply it reassembles from parts (0: none) */
    uint32_t protocol_min, protocol_max; /* protocol versions (ddata.h); 1..1 when not said */
} shoal_hello_t;

/* Hello statuses (HelloStatus numbers). */
#define SHOAL_HELLO_OK                0
#define SHOAL_HELLO_WRONG_ADDRESS     1
#define SHOAL_HELLO_NO_COMMON_VERSION 2
#define SHOAL_HELLO_QUARANTINED       3
#define SHOAL_HELLO_MALFORMED         4
#define SHOAL_HELLO_NOT_ALLOWED       5

typedef struct {
    int status;                       /* SHOAL_HELLO_* */
    char node[SHOAL_NODE_ID_MAX + 1]; /* the answering node ("" only if it sent none) */
    uint32_t version;                 /* chosen wire version when OK */
    uint64_t max_frame_bytes;         /* the answering node's frame limit (0: not said) */
    uint32_t protocol_min, protocol_max; /* protocol versions (ddata.h); 1..1 when not said */
} shoal_hello_reply_t;

/* Handshake frames always use wire version 1 framing, so any two versions can negotiate. The
   protocol range is written only when it goes past 1 (a build of protocol 1 writes the bytes
   0.1.x wrote); a parsed range that was not said is 1..1, and one with min > max is malformed. */
void shoal_hello_write(shoal_buf_t *out, const shoal_hello_t *h);
/* Validates: a peer must name itself with a well-formed id, a client must not; versions
   min <= max; `to` non-empty and short; first_seq >= 1; a to_node, when present, well formed. */
int shoal_hello_parse(const shoal_frame_t *f, shoal_hello_t *h);
void shoal_hello_reply_write(shoal_buf_t *out, const shoal_hello_reply_t *r);
/* Validates: known status; an OK reply names a well-formed node and a version. */
int shoal_hello_reply_parse(const shoal_frame_t *f, shoal_hello_reply_t *r);

/* The wire version two ranges share (the highest), or 0 when they do not overlap. */
uint32_t shoal_wire_version_pick(uint32_t peer_min, uint32_t peer_max);

/* ---------------------------------------------------------------------------------------------
 * The ZeroMQ context every node and client of the process shares: czmq's (zsys), initialized
 * once, so czmq's actors and Shoal's raw sockets live in one context. (system.c)
 */
void *shoal_zmq_context(void);
/* The node's max_inbound_connections (the default for NULL), for its listeners' guards. */
uint32_t shoal_system_max_inbound_connections(const shoal_system_t *sys);
/* The default of max_inbound_connections: a cluster of 1000 with room for tools */
#define SHOAL_MAX_INBOUND_CONNECTIONS 1024u

/* ---------------------------------------------------------------------------------------------
 * Endpoints.
 */
/* Splits "tcp://host:port" (host may be [v6]) into host and port; "ipc://path" gives the path as
   host and port 1 (node ids need a port). SHOAL_EINVAL when it is neither. */
int shoal_endpoint_split(const char *endpoint, char *host, size_t host_cap, uint16_t *port);
/* True when a Hello's `to` names the node bound at `self_endpoint`: same transport and port, and
   the same host unless one side is a wildcard or a name rather than an address (a node cannot
   resolve names without blocking, and "localhost" reaching 127.0.0.1 is not an error). */
bool shoal_endpoint_matches(const char *self_endpoint, const char *to);
/* True for the unspecified address in any spelling a socket accepts: 0.0.0.0, :: and the
   v4-mapped ::ffff:0.0.0.0 (a dual-stack socket binds it as 0.0.0.0). Used on what a bind
   endpoint names and on what each socket actually bound (ZMQ_LAST_ENDPOINT). */
struct in6_addr;
struct sockaddr;
bool shoal_in6_is_any(const struct in6_addr *a);
bool shoal_sockaddr_is_any(const struct sockaddr *sa);

#endif
