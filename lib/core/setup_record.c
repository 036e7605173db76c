/*
 * The communicator setup record (setup_record.h): packing, unpacking what
 * peers send (untrusted input: every length and value checked before use),
 * and checking that every rank agrees on what shapes the wire protocol.
 *
 * The link classes travel as a list, {count, then per class its number,
 * latency, bandwidth and source}: a class added later (a GPU link) lengthens
 * the list, and ranks that know different classes are told they differ.
 */
#include <stdio.h>
#include <string.h>

#include "blob.h"
#include "comm_impl.h"
#include "setup_record.h"
#include "util.h"

#define LINK_WORDS 4 /* class, alpha_ns, mbps, source */
#define FIXED OFCCL__SETUP_REC_FIXED

static bool agree_param(int id)
{
    return ofccl__cfg_params[id].agree && ofccl__cfg_params[id].type != OFCCL__CT_STRING;
}

void ofccl__setup_rec_agree_fill(const ofccl__config_t *cfg, ofccl__setup_rec_t *s)
{
    s->nagree = 0;
    for (int id = 0; id < OFCCL__CFG_COUNT && s->nagree < OFCCL__SETUP_AGREE_MAX; id++)
        if (agree_param(id))
            s->agree[s->nagree++] = ofccl__cfg_int(cfg, id);
}

size_t ofccl__setup_rec_pack(const ofccl__setup_rec_t *s, uint8_t *out)
{
    const uint32_t w32[] = {s->size,    s->comm_id,      s->signal_mode,
                            s->strict,  s->cq_data_size, s->nagree,
                            s->namelen, s->world,        OFCCL__LINK_CLASSES};
    const uint64_t w64[] = {s->host_key, s->ctrl_base, s->ctrl_key, s->ctrl_len};
    uint8_t *p = out;

    for (size_t k = 0; k < OFCCL__ARRAY_LEN(w32); k++, p += 4)
        ofccl__put_le32(p, w32[k]);
    memcpy(p, s->prov, OFCCL__SETUP_NAME_LEN);
    memcpy(p + OFCCL__SETUP_NAME_LEN, s->host, OFCCL__SETUP_NAME_LEN);
    p += 2 * OFCCL__SETUP_NAME_LEN;
    for (size_t k = 0; k < OFCCL__ARRAY_LEN(w64); k++, p += 8)
        ofccl__put_le64(p, w64[k]);
    for (uint32_t c = 0; c < OFCCL__LINK_CLASSES; c++, p += 4 * LINK_WORDS) {
        ofccl__put_le32(p, c);
        ofccl__put_le32(p + 4, s->link[c].alpha_ns);
        ofccl__put_le32(p + 8, s->link[c].mbps);
        ofccl__put_le32(p + 12, s->link[c].source);
    }
    for (uint32_t k = 0; k < s->nagree; k++, p += 8)
        ofccl__put_le64(p, (uint64_t)s->agree[k]);
    memcpy(p, s->name, s->namelen);
    return (size_t)(p - out) + s->namelen;
}

/* The list of link classes at `p` (nlinks entries, length checked). */
static int unpack_links(ofccl_comm_t *comm, int from, const uint8_t *p, uint32_t nlinks,
                        ofccl__setup_rec_t *s)
{
    uint32_t seen = 0;

    for (uint32_t k = 0; k < nlinks; k++, p += 4 * LINK_WORDS) {
        uint32_t c = ofccl__get_le32(p);
        ofccl__link_t l = {ofccl__get_le32(p + 4), ofccl__get_le32(p + 8), ofccl__get_le32(p + 12)};

        if (c >= 32 || (seen & (1u << c)) || l.source > OFCCL__LINK_CONFIGURED || l.mbps == 0)
            return ofccl__comm_fail(comm, OFCCL_ERR_CORRUPT,
                                    "comm setup: rank %d sent link class %u: %u ns, %u MB/s, "
                                    "source %u",
                                    from, c, l.alpha_ns, l.mbps, l.source);
        seen |= 1u << c;
        if (c < OFCCL__LINK_CLASSES)
            s->link[c] = l;
    }
    /* Classes this build does not know, or one it knows missing: another build. */
    if (seen != (1u << OFCCL__LINK_CLASSES) - 1)
        return ofccl__comm_fail(comm, OFCCL_ERR_MISMATCH,
                                "comm setup: rank %d knows link classes 0x%x, rank %d 0x%x; every "
                                "rank must run the same ofccl build",
                                from, seen, comm->rank, (1u << OFCCL__LINK_CLASSES) - 1);
    return 0;
}

int ofccl__setup_rec_unpack(ofccl_comm_t *comm, int from, const uint8_t *in, size_t len,
                            ofccl__setup_rec_t *s)
{
    uint32_t nlinks = 0;
    uint32_t *w32[] = {&s->size,   &s->comm_id, &s->signal_mode, &s->strict, &s->cq_data_size,
                       &s->nagree, &s->namelen, &s->world,       &nlinks};
    uint64_t *w64[] = {&s->host_key, &s->ctrl_base, &s->ctrl_key, &s->ctrl_len};
    const uint8_t *p = in;
    int rc;

    if (len < FIXED)
        return ofccl__comm_fail(comm, OFCCL_ERR_CORRUPT,
                                "comm setup: rank %d sent %zu bytes, at least %d expected", from,
                                len, FIXED);
    for (size_t k = 0; k < OFCCL__ARRAY_LEN(w32); k++, p += 4)
        *w32[k] = ofccl__get_le32(p);
    memcpy(s->prov, p, OFCCL__SETUP_NAME_LEN);
    s->prov[OFCCL__SETUP_NAME_LEN - 1] = '\0';
    memcpy(s->host, p + OFCCL__SETUP_NAME_LEN, OFCCL__SETUP_NAME_LEN);
    s->host[OFCCL__SETUP_NAME_LEN - 1] = '\0';
    p += 2 * OFCCL__SETUP_NAME_LEN;
    for (size_t k = 0; k < OFCCL__ARRAY_LEN(w64); k++, p += 8)
        *w64[k] = ofccl__get_le64(p);
    if (nlinks > 32 || s->nagree > OFCCL__SETUP_AGREE_MAX || s->namelen == 0 ||
        s->namelen > OFCCL__NAME_MAX ||
        len != FIXED + 4 * LINK_WORDS * (size_t)nlinks + 8 * (size_t)s->nagree + s->namelen)
        return ofccl__comm_fail(comm, OFCCL_ERR_CORRUPT,
                                "comm setup: rank %d sent %u link classes, %u settings and an "
                                "endpoint name of %u bytes in a %zu-byte record",
                                from, nlinks, s->nagree, s->namelen, len);
    if (s->world >= (uint32_t)comm->ctx->boot->size)
        return ofccl__comm_fail(comm, OFCCL_ERR_CORRUPT,
                                "comm setup: rank %d says it is rank %u of a job of %d", from,
                                s->world, comm->ctx->boot->size);
    if (s->ctrl_len < comm->ctrl_words * sizeof(uint64_t))
        return ofccl__comm_fail(comm, OFCCL_ERR_CORRUPT,
                                "comm setup: rank %d advertised a control region of %llu bytes",
                                from, (unsigned long long)s->ctrl_len);
    if ((rc = unpack_links(comm, from, p, nlinks, s)) != 0)
        return rc;
    p += 4 * LINK_WORDS * (size_t)nlinks;
    for (uint32_t k = 0; k < s->nagree; k++, p += 8)
        s->agree[k] = (int64_t)ofccl__get_le64(p);
    memcpy(s->name, p, s->namelen);
    return 0;
}

int ofccl__setup_rec_check(ofccl_comm_t *comm, int from, const ofccl__setup_rec_t *mine,
                           const ofccl__setup_rec_t *theirs)
{
    static const char *const modes[] = {"?", "cqdata", "atomic"};
#define SETUP_MISMATCH(field, fmt, a, b)                                                           \
    return ofccl__comm_fail(comm, OFCCL_ERR_MISMATCH,                                              \
                            "comm setup: rank %d has " field " " fmt ", rank %d has " fmt          \
                            "; every rank must use the same OFCCL_PROVIDER, OFCCL_STRICT, "        \
                            "OFCCL_SIGNAL and OFCCL_PEER_TRANSPORT",                               \
                            from, b, comm->rank, a)
    if (theirs->size != mine->size)
        SETUP_MISMATCH("job size", "%u", mine->size, theirs->size);
    if (strcmp(theirs->prov, mine->prov) != 0)
        SETUP_MISMATCH("provider", "%s", mine->prov, theirs->prov);
    if (theirs->strict != mine->strict)
        SETUP_MISMATCH("strict mode", "%u", mine->strict, theirs->strict);
    if (theirs->signal_mode != mine->signal_mode)
        SETUP_MISMATCH("signal path", "%s", modes[mine->signal_mode % 3],
                       modes[theirs->signal_mode % 3]);
    if (theirs->nagree != mine->nagree)
        SETUP_MISMATCH("a library build with a settings count of", "%u", mine->nagree,
                       theirs->nagree);
#undef SETUP_MISMATCH
    for (int id = 0, k = 0; id < OFCCL__CFG_COUNT && k < (int)mine->nagree; id++) {
        char a[64], b[64];
        if (!agree_param(id))
            continue;
        if (theirs->agree[k] != mine->agree[k]) {
            ofccl__config_format(id, theirs->agree[k], b, sizeof(b));
            ofccl__config_format(id, mine->agree[k], a, sizeof(a));
            return ofccl__setup_rec_setting_differs(comm, id, from, b, a);
        }
        k++;
    }
    return 0;
}

int ofccl__setup_rec_setting_differs(ofccl_comm_t *comm, int id, int r, const char *theirs,
                                     const char *mine)
{
    return ofccl__comm_fail(comm, OFCCL_ERR_MISMATCH,
                            "comm setup: rank %d has OFCCL_%s=%s, rank %d has OFCCL_%s=%s; it "
                            "must be equal on every rank (settings of scope 'all' in `ofccl_info "
                            "-c`)",
                            r, ofccl__cfg_params[id].name, theirs, comm->rank,
                            ofccl__cfg_params[id].name, mine);
}

/* Rank r's encoded record: decoded, unpacked and checked against ours. */
int ofccl__setup_rec_decode(ofccl_comm_t *comm, int r, const uint8_t *blob, size_t len,
                            const ofccl__setup_rec_t *mine, ofccl__setup_rec_t *theirs)
{
    const void *payload;
    size_t plen;
    int rc;

    if (len == 0)
        return ofccl__comm_fail(comm, OFCCL_ERR_REMOTE_ERROR,
                                "comm setup: rank %d could not set up its side of the "
                                "communicator (its own error says why)",
                                r);
    rc = ofccl__blob_decode(blob, len, OFCCL__BLOB_COMM, (uint32_t)r, &payload, &plen, &comm->err);
    if (rc)
        return ofccl__comm_fail(comm, rc, "%s", comm->err.msg);
    rc = ofccl__setup_rec_unpack(comm, r, payload, plen, theirs);
    if (rc == 0)
        rc = ofccl__setup_rec_check(comm, r, mine, theirs);
    return rc;
}

size_t ofccl__setup_slot(void)
{
    return OFCCL__BLOB_HDR + OFCCL__SETUP_REC_MAX;
}

int ofccl__setup_accept(ofccl_comm_t *comm, int r, const uint8_t *blob, size_t len,
                        ofccl__peer_rec_t *out)
{
    ofccl__setup_rec_t theirs;
    int rc = ofccl__setup_rec_decode(comm, r, blob, len, comm->setup_mine, &theirs);

    if (rc)
        return rc;
    out->comm_id = theirs.comm_id;
    out->host_key = theirs.host_key;
    ofccl__strlcpy(out->host, theirs.host, sizeof(out->host));
    out->ctrl = (ofccl__rkey_t){theirs.ctrl_base, theirs.ctrl_key, theirs.ctrl_len};
    memcpy(out->name, theirs.name, theirs.namelen);
    out->namelen = theirs.namelen;
    return 0;
}
