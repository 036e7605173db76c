/*
 * pmix_launch: a minimal PMIx launcher for tests, on one host. It starts N
 * ranks of one program as a PMIx server would (job size, local ranks, node
 * ids, host name; fences with data collection), and when a rank dies while
 * others still run it raises the failure event that PRRTE-style launchers
 * raise: PMIX_ERR_PROC_ABORTED_BY_SIG (killed by a signal) or
 * PMIX_ERR_EXIT_NONZERO_TERM (non-zero exit), with PMIX_EVENT_AFFECTED_PROC
 * naming the rank, to the whole namespace. The survivors keep running.
 *
 * Usage: pmix_launch [-t SECONDS] [-k] [-r RPH] [-i] -n N PROGRAM [ARGS...]
 *   -t  kill every rank still running after SECONDS (default 60); exit 124
 *   -k  a rank killed by a signal is expected (otherwise it fails the launch)
 *   -r  simulated hosts of RPH ranks each, host-major: rank r gets node id
 *       r / RPH, local rank r % RPH, local size RPH and OFCCL_HOST_ID
 *       fake-host<r / RPH> (as run_tcpboot.sh's OFCCL_TEST_HOST_RPH)
 *   -i  no PMIX_NODEID in the job data, as some servers: the ranks then
 *       exchange their host identities
 * Exit status: the first non-zero exit status of a rank, 1 for an unexpected
 * signal, 124 at the time limit, else 0.
 */
#include <errno.h>
#include <pmix.h>
#include <pmix_server.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NSPACE "ofccl-pmix-launch"
#define MAX_RANKS 64

static volatile int op_done;

static void op_cb(pmix_status_t status, void *cbdata)
{
    (void)status;
    (void)cbdata;
    __atomic_store_n(&op_done, 1, __ATOMIC_RELEASE);
}

/* Wait (bounded) for the last asynchronous call's op_cb. */
static void wait_op(const char *what)
{
    struct timespec nap = {0, 1000000};

    for (int ms = 0; !__atomic_load_n(&op_done, __ATOMIC_ACQUIRE); ms++) {
        if (ms > 10000) {
            fprintf(stderr, "pmix_launch: %s: no answer from the PMIx server library\n", what);
            exit(2);
        }
        nanosleep(&nap, NULL);
    }
    op_done = 0;
}

/* Every client of this one host is local: the server library has gathered
 * the fence's data already; hand it back (a copy, released when PMIx is done). */
static void release_copy(void *cbdata)
{
    free(cbdata);
}

static pmix_status_t fence_nb(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                              size_t ninfo, char *data, size_t ndata, pmix_modex_cbfunc_t cbfunc,
                              void *cbdata)
{
    char *copy = NULL;

    (void)procs;
    (void)nprocs;
    (void)info;
    (void)ninfo;
    if (ndata > 0) {
        copy = malloc(ndata);
        if (copy == NULL)
            return PMIX_ERR_NOMEM;
        memcpy(copy, data, ndata);
    }
    if (cbfunc != NULL)
        cbfunc(PMIX_SUCCESS, copy, ndata, cbdata, release_copy, copy);
    else
        free(copy);
    return PMIX_SUCCESS;
}

static pmix_status_t client_finalized(const pmix_proc_t *proc, void *server_object,
                                      pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    (void)proc;
    (void)server_object;
    (void)cbfunc;
    (void)cbdata;
    return PMIX_OPERATION_SUCCEEDED;
}

static pmix_status_t client_abort(const pmix_proc_t *proc, void *server_object, int status,
                                  const char msg[], pmix_proc_t procs[], size_t nprocs,
                                  pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    (void)server_object;
    (void)procs;
    (void)nprocs;
    (void)cbfunc;
    (void)cbdata;
    fprintf(stderr, "pmix_launch: rank %u called PMIx_Abort(%d): %s\n", proc->rank, status,
            msg != NULL ? msg : "");
    return PMIX_OPERATION_SUCCEEDED;
}

static pmix_server_module_t module = {
    .client_finalized = client_finalized,
    .abort = client_abort,
    .fence_nb = fence_nb,
};

/* Job-level data and, per rank, PMIX_PROC_DATA {rank, local rank, node id, host};
 * rph: ranks per simulated host (n: one host). */
static void register_job(int n, int rph, const char *host, bool node_ids)
{
    size_t ninfo = 7 + (size_t)n, k = 0;
    pmix_info_t *info;
    char peers[MAX_RANKS * 4] = "", *regex = NULL, *ppn = NULL;
    uint32_t u32 = (uint32_t)n, local = (uint32_t)rph, nodes = (uint32_t)((n + rph - 1) / rph);

    for (int r = 0; r < n; r++)
        snprintf(peers + strlen(peers), sizeof(peers) - strlen(peers), "%s%d", r ? "," : "", r);
    PMIX_INFO_CREATE(info, ninfo);
    PMIX_INFO_LOAD(&info[k++], PMIX_UNIV_SIZE, &u32, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_JOB_SIZE, &u32, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_LOCAL_SIZE, &local, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_LOCAL_PEERS, peers, PMIX_STRING);
    PMIx_generate_regex(host, &regex);
    PMIx_generate_ppn(peers, &ppn);
    PMIX_INFO_LOAD(&info[k++], PMIX_NODE_MAP, regex, PMIX_REGEX);
    PMIX_INFO_LOAD(&info[k++], PMIX_PROC_MAP, ppn, PMIX_REGEX);
    PMIX_INFO_LOAD(&info[k++], PMIX_NUM_NODES, &nodes, PMIX_UINT32);
    for (int r = 0; r < n; r++) {
        pmix_data_array_t *da;
        pmix_info_t *pi;
        pmix_rank_t rank = (pmix_rank_t)r;
        uint16_t lrank = (uint16_t)(r % rph);
        uint32_t node = (uint32_t)(r / rph);

        PMIX_DATA_ARRAY_CREATE(da, node_ids ? 4 : 3, PMIX_INFO);
        pi = da->array;
        PMIX_INFO_LOAD(&pi[0], PMIX_RANK, &rank, PMIX_PROC_RANK);
        PMIX_INFO_LOAD(&pi[1], PMIX_LOCAL_RANK, &lrank, PMIX_UINT16);
        PMIX_INFO_LOAD(&pi[2], PMIX_HOSTNAME, host, PMIX_STRING);
        if (node_ids)
            PMIX_INFO_LOAD(&pi[3], PMIX_NODEID, &node, PMIX_UINT32);
        PMIX_INFO_LOAD(&info[k++], PMIX_PROC_DATA, da, PMIX_DATA_ARRAY);
        PMIX_DATA_ARRAY_FREE(da);
    }
    pmix_nspace_t ns;

    PMIX_LOAD_NSPACE(ns, NSPACE);
    if (PMIx_server_register_nspace(ns, n, info, k, op_cb, NULL) != PMIX_SUCCESS) {
        fprintf(stderr, "pmix_launch: PMIx_server_register_nspace failed\n");
        exit(2);
    }
    wait_op("registering the job");
    PMIX_INFO_FREE(info, ninfo);
    free(regex);
    free(ppn);
}

/* Tell the ranks still running that `rank` is gone. */
static void notify_death(int rank, pmix_status_t code)
{
    pmix_proc_t dead;
    pmix_info_t info[1];

    PMIX_LOAD_PROCID(&dead, NSPACE, (pmix_rank_t)rank);
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_LOAD(&info[0], PMIX_EVENT_AFFECTED_PROC, &dead, PMIX_PROC);
    if (PMIx_Notify_event(code, &dead, PMIX_RANGE_NAMESPACE, info, 1, op_cb, NULL) == PMIX_SUCCESS)
        wait_op("notifying a death");
    PMIX_INFO_DESTRUCT(&info[0]);
}

static double now_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int n = 0, rph = 0, opt, expect_kill = 0, running, status = 0;
    bool node_ids = true;
    double limit = 60, t0;
    pid_t pids[MAX_RANKS];
    char host[64], tmpdir[] = "/tmp/ofccl-pmix-launch.XXXXXX";
    pmix_info_t sinfo[2];

    while ((opt = getopt(argc, argv, "+t:kn:r:i")) != -1) {
        if (opt == 'i')
            node_ids = false;
        else if (opt == 'r')
            rph = atoi(optarg);
        else if (opt == 't')
            limit = atof(optarg);
        else if (opt == 'k')
            expect_kill = 1;
        else if (opt == 'n')
            n = atoi(optarg);
        else
            return 2;
    }
    if (rph == 0)
        rph = n;
    if (n < 1 || n > MAX_RANKS || rph < 1 || optind >= argc) {
        fprintf(stderr,
                "usage: pmix_launch [-t SECONDS] [-k] [-r RPH] [-i] -n N PROGRAM [ARGS...]\n");
        return 2;
    }
    if (gethostname(host, sizeof(host) - 1) != 0)
        strcpy(host, "localhost");
    host[sizeof(host) - 1] = '\0';
    if (mkdtemp(tmpdir) == NULL) {
        perror("pmix_launch: mkdtemp");
        return 2;
    }
    PMIX_INFO_CONSTRUCT(&sinfo[0]);
    PMIX_INFO_CONSTRUCT(&sinfo[1]);
    PMIX_INFO_LOAD(&sinfo[0], PMIX_SERVER_TMPDIR, tmpdir, PMIX_STRING);
    PMIX_INFO_LOAD(&sinfo[1], PMIX_SYSTEM_TMPDIR, tmpdir, PMIX_STRING);
    if (PMIx_server_init(&module, sinfo, 2) != PMIX_SUCCESS) {
        fprintf(stderr, "pmix_launch: PMIx_server_init failed\n");
        rmdir(tmpdir);
        return 77;
    }
    register_job(n, rph, host, node_ids);
    for (int r = 0; r < n; r++) {
        pmix_proc_t proc;
        char **env = NULL;

        PMIX_LOAD_PROCID(&proc, NSPACE, (pmix_rank_t)r);
        if (PMIx_server_register_client(&proc, getuid(), getgid(), NULL, op_cb, NULL) !=
            PMIX_SUCCESS) {
            fprintf(stderr, "pmix_launch: PMIx_server_register_client failed\n");
            return 2;
        }
        wait_op("registering a client");
        if (PMIx_server_setup_fork(&proc, &env) != PMIX_SUCCESS) {
            fprintf(stderr, "pmix_launch: PMIx_server_setup_fork failed\n");
            return 2;
        }
        pids[r] = fork();
        if (pids[r] == 0) {
            char host_id[32];

            for (char **e = env; e != NULL && *e != NULL; e++)
                putenv(*e);
            snprintf(host_id, sizeof(host_id), "fake-host%d", r / rph);
            if (rph < n)
                setenv("OFCCL_HOST_ID", host_id, 1);
            execvp(argv[optind], argv + optind);
            perror("pmix_launch: exec");
            _exit(127);
        }
    }
    t0 = now_s();
    for (running = n; running > 0;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);

        if (pid <= 0) {
            if (now_s() - t0 > limit) {
                fprintf(stderr, "pmix_launch: time limit (%.0f s): killing %d rank(s)\n", limit,
                        running);
                for (int r = 0; r < n; r++)
                    if (pids[r] > 0)
                        kill(pids[r], SIGKILL);
                status = 124;
                limit = 1e9;
            }
            usleep(1000);
            continue;
        }
        for (int r = 0; r < n; r++) {
            if (pids[r] != pid)
                continue;
            pids[r] = 0;
            running--;
            if (WIFSIGNALED(st)) {
                fprintf(stderr, "pmix_launch: rank %d killed by signal %d\n", r, WTERMSIG(st));
                if (!expect_kill && status == 0)
                    status = 1;
                if (running > 0)
                    notify_death(r, PMIX_ERR_PROC_ABORTED_BY_SIG);
            } else if (WEXITSTATUS(st) != 0) {
                fprintf(stderr, "pmix_launch: rank %d exited with status %d\n", r, WEXITSTATUS(st));
                if (status == 0)
                    status = WEXITSTATUS(st);
                if (running > 0)
                    notify_death(r, PMIX_ERR_EXIT_NONZERO_TERM);
            }
        }
    }
    PMIx_server_finalize();
    rmdir(tmpdir);
    return status;
}
