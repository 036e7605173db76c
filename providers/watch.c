/*
 * Watching peers' processes through pidfds (see watch.h).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"
#include "watch.h"

#define WATCH_NS 1000000ull /* how often peers' processes are checked */
#define WATCH_WINDOW 64     /* pidfds polled at a time */

static int make_arrays(ofccl__watch_t *w, int n)
{
    w->pidfd = malloc((size_t)n * sizeof(*w->pidfd));
    w->pid = malloc((size_t)n * sizeof(*w->pid));
    if (w->pidfd == NULL || w->pid == NULL) {
        free(w->pidfd);
        free(w->pid);
        w->pidfd = w->pid = NULL;
        return ENOMEM;
    }
    /* -1, not 0: closing an unwatched peer must not close stdin. */
    for (int r = 0; r < n; r++)
        w->pidfd[r] = w->pid[r] = -1;
    *w = (ofccl__watch_t){.pidfd = w->pidfd, .pid = w->pid, .n = n, .gone = -1, .dying = -1};
    return 0;
}

int ofccl__watch_add(ofccl__watch_t *w, int n, int peer, int pid)
{
    int fd;

    if (w->n == 0 && n > 0 && make_arrays(w, n) != 0)
        return ENOMEM;
    if (peer < 0 || peer >= w->n || pid <= 0)
        return EINVAL;
    if (w->pidfd[peer] >= 0)
        close(w->pidfd[peer]);
    w->pidfd[peer] = -1;
    w->pid[peer] = pid;
    fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd >= 0) {
        w->pidfd[peer] = fd;
        return 0;
    }
    /* No such process: the peer has exited already. */
    if (errno == ESRCH && w->gone < 0 && w->dying < 0)
        w->dying = peer;
    return errno;
}

int ofccl__watch_poll(ofccl__watch_t *w, int *pid)
{
    struct pollfd fds[WATCH_WINDOW];
    int peers[WATCH_WINDOW], k = 0;
    uint64_t now;

    if (pid != NULL)
        *pid = -1;
    if (w->n == 0)
        return -1;
    if (w->gone >= 0) {
        if (pid != NULL)
            *pid = w->pid[w->gone];
        return w->gone;
    }
    now = ofccl__coarse_ns();
    if (now < w->next_ns)
        return -1;
    w->next_ns = now + WATCH_NS;
    /* Reported one poll late: what the peer wrote before it exited has been
     * read by the progress passes in between. */
    if (w->dying >= 0) {
        w->gone = w->dying;
        if (pid != NULL)
            *pid = w->pid[w->gone];
        return w->gone;
    }
    for (int i = 0; i < w->n && k < WATCH_WINDOW; i++) {
        int r = (w->next + i) % w->n;
        if (w->pidfd[r] >= 0) {
            fds[k] = (struct pollfd){.fd = w->pidfd[r], .events = POLLIN};
            peers[k++] = r;
        }
    }
    w->next = k > 0 ? (peers[k - 1] + 1) % w->n : 0;
    /* A pidfd turns readable when its process exits. */
    if (k > 0 && poll(fds, (nfds_t)k, 0) > 0)
        for (int i = 0; i < k && w->dying < 0; i++)
            if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
                w->dying = peers[i];
    return -1;
}

void ofccl__watch_close(ofccl__watch_t *w)
{
    for (int r = 0; r < w->n; r++)
        if (w->pidfd[r] >= 0)
            close(w->pidfd[r]);
    free(w->pidfd);
    free(w->pid);
    *w = (ofccl__watch_t){0};
}
