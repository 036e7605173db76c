/*
 * The per-provider quirk table: what fi_info does not say (or says in a way we
 * cannot act on), written down once as data. Every flag below is backed by the
 * provider's man page (fi_<prov>(7), libfabric 1.17) or by what fi_getinfo
 * reports on a 1.17 installation; the note says which. ofccl's own local
 * transport has a row too, so choosing ("auto", one host only) and sizing
 * read one table for every transport. Row order matters to "auto": the first
 * OFCCL__Q_AUTO row that fits the job wins.
 */
#include <string.h>

#include "prov.h"

const ofccl__quirk_t ofccl__quirks[] = {
    {"local", "local",
     OFCCL__Q_INTRA_NODE_ONLY | OFCCL__Q_CPU_COPIES | OFCCL__Q_AUTO | OFCCL__Q_NO_FABRIC,
     "ofccl's own transport between processes of this host, no libfabric: windows peers write "
     "into are memfd shared memory each peer maps once, so an RMA write is one memcpy by the "
     "initiator, an atomic a CPU atomic, CQ data a shared ring; other registered memory is "
     "written with process_vm_writev; needs one user and one PID namespace; no strict mode",
     2, 2, 1},
    {"shm", "shm",
     OFCCL__Q_INTRA_NODE_ONLY | OFCCL__Q_STRICT_CAPABLE | OFCCL__Q_PREFER_OFFSETS |
         OFCCL__Q_NAME_PER_PROCESS | OFCCL__Q_NO_DC_ATOMIC | OFCCL__Q_CPU_COPIES | OFCCL__Q_AUTO,
     "shared memory: reaches processes on this host only; native atomics in the target's "
     "progress; a non-fetching atomic with FI_DELIVERY_COMPLETE corrupts memory in 1.17 once "
     "3+ peers are active (its pending response is built from an unset result iov), so atomic "
     "adds are fetching atomics; with FI_MR_VIRT_ADDR offered it takes a "
     "fast RMA path that does not check keys, so offsets are asked for first; default endpoint "
     "names are pid:domain:ep, equal for two contexts of one process, so ofccl names them",
     8, 20, 16},
    {"tcp;ofi_rxm", "tcp",
     OFCCL__Q_ATOMIC_EMULATED | OFCCL__Q_LOOPBACK_DOMAIN | OFCCL__Q_STRICT_CAPABLE |
         OFCCL__Q_NO_CLOSE_MIDWRITE | OFCCL__Q_CPU_COPIES | OFCCL__Q_AUTO,
     "RDM emulated by rxm over tcp MSG endpoints; rxm carries atomics as messages applied in "
     "software at the target; has an 'lo' domain; first ops return EAGAIN while connecting; "
     "closing an endpoint while a peer's RMA write into it is half received makes tcp report "
     "the cancelled receive with a NULL op_context, which rxm dereferences (1.17: segfault in "
     "rxm_handle_comp_error), so a failed communicator's endpoint is left open",
     8, 20, 1},
    {"verbs;ofi_rxm", "verbs",
     OFCCL__Q_CQDATA_4 | OFCCL__Q_ATOMIC_EMULATED | OFCCL__Q_NEEDS_RX_CQ_DATA |
         OFCCL__Q_NEEDS_MR_LOCAL,
     "InfiniBand/RoCE: immediate data is 32 bits; write-with-immediate consumes a posted "
     "receive (FI_RX_CQ_DATA); verbs requires FI_MR_LOCAL; rxm applies atomics in software",
     0, 0, 0},
    {"sockets", "sockets",
     OFCCL__Q_DEPRECATED | OFCCL__Q_LOOPBACK_DOMAIN | OFCCL__Q_STRICT_CAPABLE | OFCCL__Q_CPU_COPIES,
     "deprecated by libfabric in favour of tcp; meant for development and debugging; has an "
     "'lo' domain",
     0, 0, 0},
    {"efa", "efa", OFCCL__Q_CQDATA_4 | OFCCL__Q_ATOMIC_EMULATED,
     "AWS EFA: remote CQ data is 4 bytes; the RDM protocol implements atomics in software", 0, 0,
     0},
    {"cxi", "cxi", 0, "HPE Slingshot: RMA and atomics are executed by the NIC", 0, 0, 0},
};

const size_t ofccl__quirk_count = sizeof(ofccl__quirks) / sizeof(ofccl__quirks[0]);

int ofccl__quirk_find(const char *name)
{
    if (name == NULL || name[0] == '\0')
        return -1;
    /* Exact prov_name first, so an alias can never shadow a real provider name. */
    for (size_t i = 0; i < ofccl__quirk_count; i++)
        if (strcmp(ofccl__quirks[i].prov_name, name) == 0)
            return (int)i;
    for (size_t i = 0; i < ofccl__quirk_count; i++)
        if (strcmp(ofccl__quirks[i].alias, name) == 0)
            return (int)i;
    return -1;
}

void ofccl__quirk_apply(ofccl__prov_caps_t *caps, int row, bool strict)
{
    unsigned flags = 0;

    if (row >= 0 && (size_t)row < ofccl__quirk_count)
        flags = ofccl__quirks[row].flags;
    else
        row = -1;
    caps->quirk_row = row;
    caps->quirks = flags;
    caps->strict = strict;

    /* ofccl carries signals in a uint64_t: more than 8 bytes is never usable. */
    if (caps->cq_data_size > 8)
        caps->cq_data_size = 8;
    if ((flags & OFCCL__Q_CQDATA_4) && caps->cq_data_size > 4)
        caps->cq_data_size = 4;
    caps->atomic_native = !(flags & OFCCL__Q_ATOMIC_EMULATED);
    if (flags & OFCCL__Q_NEEDS_RX_CQ_DATA)
        caps->rx_cq_data = true;
    if (flags & OFCCL__Q_NEEDS_MR_LOCAL)
        caps->mr_local = true;

    if (strict) {
        /* Behave as verbs demands, so the verbs code path runs on tcp and shm:
         * register every local buffer, read every key back, use only 4 bytes of
         * immediate data, and keep receives posted for it. Offset addressing is
         * requested at open time (it needs the provider's consent), so
         * virt_addr is left as probed. */
        caps->mr_local = true;
        caps->prov_key = true;
        caps->rx_cq_data = true;
        if (caps->cq_data_size > 4)
            caps->cq_data_size = 4;
    }
}
