/*
 * Private to lib/core: what communicator creation (setup.c) and the
 * communicator's own calls (comm.c) share.
 */
#ifndef OFCCL_CORE_COMM_IMPL_H
#define OFCCL_CORE_COMM_IMPL_H

#include "core.h"

/* The signal path this communicator uses (OFCCL_SIGNAL and the provider's
 * capabilities): sets comm->signal_mode or fails naming what is missing. */
int ofccl__comm_choose_signal(ofccl_comm_t *comm, const ofccl__prov_caps_t *caps);
/* Point the endpoint's completion handlers at this communicator. */
void ofccl__comm_handlers(ofccl_comm_t *comm);
/* Release everything a (possibly half-built) communicator holds; local. */
void ofccl__comm_free(ofccl_comm_t *comm);

#endif
