/*
 * The communicator setup record (setup_record.c): what each rank publishes
 * when a communicator is created, and how it travels. Little-endian on the
 * wire: fixed words, the provider and host names, the control region, the
 * cost model's constants as a list of link classes (links.c), the values of
 * every setting that must agree across ranks (config.h: scope AGREE), the
 * endpoint name.
 */
#ifndef OFCCL_CORE_SETUP_RECORD_H
#define OFCCL_CORE_SETUP_RECORD_H

#include "core.h"

#define OFCCL__SETUP_NAME_LEN 64
#define OFCCL__SETUP_AGREE_MAX 32

typedef struct ofccl__setup_rec {
    uint32_t size, comm_id, signal_mode, strict, cq_data_size, nagree, namelen;
    uint32_t world; /* the rank in the bootstrap's job (the launcher's rank) */
    /* This rank's cost-model constants, configured or measured, by link
     * class; the record lists every class this build knows. */
    ofccl__link_t link[OFCCL__LINK_CLASSES];
    char prov[OFCCL__SETUP_NAME_LEN];
    char host[OFCCL__SETUP_NAME_LEN]; /* the host's name, for messages */
    uint64_t host_key; /* a hash of the host's identity: ranks on one host share it */
    uint64_t ctrl_base, ctrl_key, ctrl_len;
    int64_t agree[OFCCL__SETUP_AGREE_MAX]; /* in table order, string settings excluded */
    uint8_t name[OFCCL__NAME_MAX];
} ofccl__setup_rec_t;

/* Bytes of the fixed part, and of the largest packed record: a link class
 * is 4 words, a setting 8 bytes. */
#define OFCCL__SETUP_REC_FIXED (4 * 9 + 2 * OFCCL__SETUP_NAME_LEN + 8 * 4)
#define OFCCL__SETUP_REC_MAX                                                                       \
    (OFCCL__SETUP_REC_FIXED + 16 * OFCCL__LINK_CLASSES + 8 * OFCCL__SETUP_AGREE_MAX +              \
     OFCCL__NAME_MAX)
/* The settings every rank must agree on, from `cfg`. */
void ofccl__setup_rec_agree_fill(const ofccl__config_t *cfg, ofccl__setup_rec_t *s);
/* Pack into `out` (ofccl__setup_rec_max bytes): the length. */
size_t ofccl__setup_rec_pack(const ofccl__setup_rec_t *s, uint8_t *out);
/* Unpack rank `from`'s record (untrusted: every length is checked before
 * use): 0, or the communicator's CORRUPT naming the rank. */
int ofccl__setup_rec_unpack(ofccl_comm_t *comm, int from, const uint8_t *in, size_t len,
                            ofccl__setup_rec_t *s);
/* Does `theirs` agree with `mine` on what shapes the wire protocol and on
 * every setting of scope all? 0, or the communicator's MISMATCH naming the
 * field, both values and the rank. */
int ofccl__setup_rec_check(ofccl_comm_t *comm, int from, const ofccl__setup_rec_t *mine,
                           const ofccl__setup_rec_t *theirs);
/* Rank r's encoded record (`len` bytes from the exchange; 0: its side
 * failed): decoded, unpacked and checked against `mine`. */
int ofccl__setup_rec_decode(ofccl_comm_t *comm, int r, const uint8_t *blob, size_t len,
                            const ofccl__setup_rec_t *mine, ofccl__setup_rec_t *theirs);
/* Fail creation with MISMATCH: setting `id` (a row of the settings table) is
 * `theirs` on rank r and `mine` here, both formatted as the user writes them. */
int ofccl__setup_rec_setting_differs(ofccl_comm_t *comm, int id, int r, const char *theirs,
                                     const char *mine);

#endif
