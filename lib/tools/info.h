/* ofccl_info's modes that live in their own files. */
#ifndef OFCCL_TOOLS_INFO_H
#define OFCCL_TOOLS_INFO_H

/* -j: join the job and print, from rank 0, its hosts, the transport per peer
 * class, the chooser's algorithms per size and every setting with its source
 * (`settings`: NULL-terminated "NAME=value" list given as API settings). */
int ofccl__info_job(const char *const *settings);

/* The GPU section (info_gpu.c): the build, the driver, the devices and
 * whether every pair of them is P2P. Loads the CUDA driver when built in. */
void ofccl__info_gpu(void);

#endif
