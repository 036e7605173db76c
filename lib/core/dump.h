/*
 * The live state dump: every pending request of every communicator of a
 * context — operation, sequence, bucket, algorithm, phase, age and the peers
 * it still waits for — to a FILE (ofccl_dump_state) or to the log. With
 * OFCCL_DUMP_SIGNAL=1, SIGUSR1 asks for it: the handler only writes a byte to
 * a pipe; a small thread reads it and dumps each registered context under its
 * lock, between two progress passes, so a stuck job is diagnosed without
 * being stopped.
 */
#ifndef OFCCL_CORE_DUMP_H
#define OFCCL_CORE_DUMP_H

#include "core.h"

/* Register the context for SIGUSR1 when OFCCL_DUMP_SIGNAL=1 (installs the
 * handler and starts the thread with the first such context). */
int ofccl__dump_start(ofccl_ctx_t *ctx);
/* Unregister it (the last one restores the previous handler). */
void ofccl__dump_stop(ofccl_ctx_t *ctx);

#endif
