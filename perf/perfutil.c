/* Helpers shared by the benchmarks; see perfutil.h. */
#include "perfutil.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

const char *const perf_dtype_names[PERF_DTYPE_COUNT] = {"f32", "f64", "bf16", "f16"};
const char *const perf_op_names[2] = {"sum", "avg"};

size_t perf_dtype_size(perf_dtype_t dt)
{
    static const size_t sz[PERF_DTYPE_COUNT] = {4, 8, 2, 2};
    return (unsigned)dt < PERF_DTYPE_COUNT ? sz[dt] : 0;
}

int perf_lookup(const char *name, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcasecmp(name, names[i]) == 0)
            return i;
    return -1;
}

size_t perf_parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    int shift = 0;

    switch (toupper((unsigned char)*end)) {
    case 'G':
        shift += 10; /* fall through */
    case 'M':
        shift += 10; /* fall through */
    case 'K':
        shift += 10;
        end++;
        break;
    default:
        break;
    }
    if (end == s || *end != '\0' || v < 0 || v * (double)(1ull << shift) > 1e15)
        return 0;
    return (size_t)(v * (double)(1ull << shift));
}

double perf_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

int perf_tcp_listen(uint16_t *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 1) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static uint32_t f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static float bits_f32(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

uint16_t perf_f32_to_bf16(float f)
{
    uint32_t b = f32_bits(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
        return (uint16_t)((b >> 16) | 0x40);
    b += 0x7fffu + ((b >> 16) & 1u); /* round to nearest even; overflow carries into inf */
    return (uint16_t)(b >> 16);
}

float perf_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t perf_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000u, m, h, rem;

    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) /* inf, NaN */
        return (uint16_t)(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0));
    if (x >= 0x477ff000u) /* >= 65520: rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (x < 0x38800000u) /* below 2^-14: subnormal, a multiple of 2^-24; scaling is exact */
        return (uint16_t)(sign | (uint32_t)nearbyintf(bits_f32(x) * 16777216.0f));
    m = x & 0x7fffffu;
    h = (((x >> 23) - 112u) << 10) | (m >> 13);
    rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* may carry into the exponent, which is the right answer */
    return (uint16_t)(sign | h);
}

float perf_f16_to_f32(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    unsigned m = h & 0x3ffu;
    float v;

    if (e == 0)
        v = ldexpf((float)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexpf((float)(m | 0x400u), e - 25);
    return (h & 0x8000u) ? -v : v;
}

void perf_store(perf_dtype_t dt, void *p, size_t i, double v)
{
    switch (dt) {
    case PERF_F32:
        ((float *)p)[i] = (float)v;
        break;
    case PERF_F64:
        ((double *)p)[i] = v;
        break;
    case PERF_BF16:
        ((uint16_t *)p)[i] = perf_f32_to_bf16((float)v);
        break;
    default:
        ((uint16_t *)p)[i] = perf_f32_to_f16((float)v);
        break;
    }
}

double perf_load(perf_dtype_t dt, const void *p, size_t i)
{
    switch (dt) {
    case PERF_F32:
        return ((const float *)p)[i];
    case PERF_F64:
        return ((const double *)p)[i];
    case PERF_BF16:
        return perf_bf16_to_f32(((const uint16_t *)p)[i]);
    default:
        return perf_f16_to_f32(((const uint16_t *)p)[i]);
    }
}

/* Largest |k| of a value k/8: any sum over nranks stays within 256 for the
 * 16-bit types (every integer up to 256 is exact in bf16), 128*n for f32. */
static int value_range(perf_dtype_t dt, int nranks)
{
    int k = 128;
    if ((dt == PERF_BF16 || dt == PERF_F16) && nranks > 2)
        k = 256 / nranks > 1 ? 256 / nranks : 1;
    return k;
}

double perf_value(perf_dtype_t dt, int nranks, int r, int it, size_t g)
{
    uint32_t h = (uint32_t)g * 0x9e3779b1u ^ (uint32_t)((uint64_t)g >> 32) * 0x7feb352du ^
                 (uint32_t)r * 0x85ebca77u ^ (uint32_t)it * 0xc2b2ae3du;
    int k = value_range(dt, nranks);
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    return (double)((int)(h % (uint32_t)(2 * k)) - k) / 8.0;
}

double perf_reference(perf_dtype_t dt, perf_op_t op, int nranks, int it, size_t g)
{
    if (dt == PERF_F64) {
        double s = 0;
        for (int r = 0; r < nranks; r++)
            s += perf_value(dt, nranks, r, it, g);
        return op == PERF_AVG ? s / nranks : s;
    }
    float s = 0;
    for (int r = 0; r < nranks; r++)
        s += (float)perf_value(dt, nranks, r, it, g);
    if (op == PERF_AVG)
        s /= (float)nranks;
    if (dt == PERF_BF16)
        return perf_bf16_to_f32(perf_f32_to_bf16(s));
    if (dt == PERF_F16)
        return perf_f16_to_f32(perf_f32_to_f16(s));
    return s;
}

void perf_fill(perf_dtype_t dt, void *p, size_t n, int nranks, int rank, int it, size_t first)
{
    for (size_t i = 0; i < n; i++)
        perf_store(dt, p, i, perf_value(dt, nranks, rank, it, first + i));
}

long perf_check_values(perf_dtype_t dt, const void *p, size_t n, int nranks, int rank, int it,
                       size_t first)
{
    long wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += !(perf_load(dt, p, i) == perf_value(dt, nranks, rank, it, first + i));
    return wrong;
}

long perf_check_reduced(perf_dtype_t dt, perf_op_t op, const void *p, size_t n, int nranks, int it,
                        size_t first)
{
    long wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += !(perf_load(dt, p, i) == perf_reference(dt, op, nranks, it, first + i));
    return wrong;
}

int perf_sweep(size_t b, size_t e, double f, size_t *sizes)
{
    int n = 0;
    double s = (double)(b ? b : 1);

    if (f < 1.0001) /* a factor of 1 would never end: treat as a single size */
        f = (double)e / s + 1;
    while (s <= (double)e && n < PERF_MAX_SIZES) {
        sizes[n++] = (size_t)s;
        s *= f;
    }
    return n;
}

static const char *csv_header = "impl,transport,algo,mem,mode,place,ranks,coll,size,count,type,"
                                "redop,time_us,algbw_GBps,busbw_GBps,wrong\n";

static const char *place_name(const perf_meta_t *m)
{
    return m->in_place ? "in-place" : "out-of-place";
}

int perf_out_open(perf_out_t *o, const perf_meta_t *meta, const char *csv, const char *json)
{
    const perf_meta_t *m = meta;

    memset(o, 0, sizeof(*o));
    o->meta = *meta;
    if (csv && !(o->csv = fopen(csv, "w"))) {
        perror(csv);
        return -1;
    }
    if (json && !(o->json = fopen(json, "w"))) {
        perror(json);
        return -1;
    }
    if (o->csv)
        fputs(csv_header, o->csv);
    if (o->json)
        fprintf(o->json,
                "{\"impl\": \"%s\", \"transport\": \"%s\", \"algo\": \"%s\", \"mem\": \"%s\", "
                "\"mode\": \"%s\", \"place\": \"%s\", \"ranks\": %d, \"iters\": %d, "
                "\"warmup\": %d, \"check\": %d,\n"
                " \"rows\": [",
                m->impl, m->transport, m->algo, m->mem, m->mode, place_name(m), m->nranks, m->iters,
                m->warmup, m->check);
    printf("# %s over %s: %d ranks, algo %s, memory %s, %s buffers, %s, %d iterations after %d "
           "warm-up%s\n",
           m->impl, m->transport, m->nranks, m->algo, m->mem, m->mode, place_name(m), m->iters,
           m->warmup, m->check ? ", every iteration checked element by element" : "");
    printf("# size: bytes of the gathered buffer / reduce input / broadcast buffer / pushed "
           "weights; count: elements per rank%s (push: buckets)\n"
           "# time: average per iteration, slowest rank; busbw = algbw * (n-1)/n (bc, push: "
           "algbw)\n",
           strcmp(m->mode, "bucket") == 0 ? " (bucket: of the whole bucket)" : "");
    printf("# %4s %12s %12s %6s %6s %11s %11s %11s %8s\n", "coll", "size(B)", "count", "type",
           "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    return 0;
}

void perf_out_result(perf_out_t *o, int coll, size_t bytes, size_t count, perf_dtype_t dt,
                     perf_op_t op, double us, long wrong, int nranks)
{
    perf_row_t row = {coll == 0 ? "ag" : "rs",
                      bytes,
                      count,
                      perf_dtype_names[dt],
                      coll == 0 ? "none" : perf_op_names[op],
                      us,
                      wrong,
                      nranks};
    perf_out_row(o, &row);
}

void perf_out_bytes(perf_out_t *o, const char *coll, size_t bytes, size_t count, const char *type,
                    double us, long wrong, int nranks)
{
    perf_row_t row = {coll, bytes, count, type, "none", us, wrong, nranks};
    perf_out_row(o, &row);
}

/* Bytes each rank's link carries per byte of `bytes`: (n-1)/n for all-gather
 * and reduce-scatter, 1 for broadcast and push (every receiver gets it all). */
static double bus_factor(const perf_row_t *r)
{
    if (strcmp(r->coll, "bc") == 0 || strcmp(r->coll, "push") == 0)
        return 1.0;
    return (r->nranks - 1) / (double)r->nranks;
}

void perf_out_row(perf_out_t *o, const perf_row_t *r)
{
    double algbw = (double)r->bytes / r->us / 1e3;
    double busbw = algbw * bus_factor(r);
    const perf_meta_t *m = &o->meta;

    printf("  %4s %12zu %12zu %6s %6s %11.2f %11.3f %11.3f %8ld\n", r->coll, r->bytes, r->count,
           r->type, r->redop, r->us, algbw, busbw, r->wrong);
    fflush(stdout);
    if (o->csv)
        fprintf(o->csv, "%s,%s,%s,%s,%s,%s,%d,%s,%zu,%zu,%s,%s,%.3f,%.4f,%.4f,%ld\n", m->impl,
                m->transport, m->algo, m->mem, m->mode, place_name(m), r->nranks, r->coll, r->bytes,
                r->count, r->type, r->redop, r->us, algbw, busbw, r->wrong);
    if (o->json)
        fprintf(o->json,
                "%s\n  {\"coll\": \"%s\", \"size\": %zu, \"count\": %zu, \"type\": \"%s\", "
                "\"redop\": \"%s\", \"time_us\": %.3f, \"algbw\": %.4f, \"busbw\": %.4f, "
                "\"wrong\": %ld}",
                o->rows ? "," : "", r->coll, r->bytes, r->count, r->type, r->redop, r->us, algbw,
                busbw, r->wrong);
    o->rows++;
}

int perf_out_close(perf_out_t *o, const char *extra_json)
{
    int rc = 0;
    if (o->json) {
        fprintf(o->json, "\n ]%s%s}\n", extra_json ? ",\n " : "", extra_json ? extra_json : "");
        rc |= fclose(o->json);
    }
    if (o->csv)
        rc |= fclose(o->csv);
    o->csv = o->json = NULL;
    return rc ? -1 : 0;
}

int perf_coll_selected(int sel, int coll)
{
    if (coll == 2 || coll == 5) /* "all" and "bp" name groups, not collectives */
        return 0;
    return sel == coll || (sel == 2 && coll < 2) || (sel == 5 && coll >= 3);
}

size_t perf_push_tensor_bytes(size_t bytes, int t)
{
    size_t each = bytes / PERF_PUSH_NT;
    return t < PERF_PUSH_NT - 1 ? each : bytes - each * (PERF_PUSH_NT - 1);
}

int perf_push_buckets(size_t bytes, size_t bucket_bytes, int first[PERF_PUSH_NT + 1])
{
    size_t acc = 0;
    int nb = 0;

    for (int t = 0; t < PERF_PUSH_NT; t++) {
        size_t len = perf_push_tensor_bytes(bytes, t);
        if (t == 0 || (acc > 0 && acc + len > bucket_bytes)) {
            first[nb++] = t;
            acc = 0;
        }
        acc += len;
    }
    first[nb] = PERF_PUSH_NT;
    return nb;
}

size_t perf_push_shard(size_t len, int nsenders, int i, size_t *off)
{
    size_t c = (len + (size_t)nsenders - 1) / (size_t)nsenders;
    size_t a = (size_t)i * c < len ? (size_t)i * c : len;
    *off = a;
    return len - a < c ? len - a : c;
}

unsigned char perf_push_byte(int t, size_t i, int it)
{
    return (unsigned char)(i * 131u + (i >> 9) * 7u + (size_t)t * 29u + (size_t)it * 53u + 1u);
}

void perf_progress_start(perf_progress_t *p, const char *tool, int enabled)
{
    memset(p, 0, sizeof(*p));
    p->tool = tool;
    p->on = enabled && isatty(STDERR_FILENO);
    p->t0_us = perf_now_us();
}

void perf_progress_add(perf_progress_t *p, const size_t *sizes, int n)
{
    for (int i = 0; i < n; i++)
        p->bytes_total += (double)sizes[i] + 65536.0; /* a fixed cost per size too */
    p->total += n;
}

void perf_progress_step(perf_progress_t *p, const char *what, size_t bytes)
{
    double el;

    p->done++;
    p->bytes_done += (double)bytes + 65536.0;
    if (!p->on)
        return;
    el = (perf_now_us() - p->t0_us) / 1e6;
    fprintf(stderr, "\r%s: %s %d/%d sizes done, about %.0f s left   ", p->tool, what, p->done,
            p->total,
            p->bytes_done > 0 ? el * (p->bytes_total - p->bytes_done) / p->bytes_done : 0.0);
    fflush(stderr);
}

void perf_progress_end(perf_progress_t *p)
{
    if (p->on && p->done)
        fprintf(stderr, "\r%s: %d sizes in %.0f s%30s\n", p->tool, p->done,
                (perf_now_us() - p->t0_us) / 1e6, "");
}
