#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

extern char **environ;

const ofccl__cfg_param_t ofccl__cfg_params[OFCCL__CFG_COUNT] = {
#define OFCCL__SCOPE_AGREE 1
#define OFCCL__SCOPE_LOCAL 0
#define OFCCL__X_PARAM(id, type, scope, def, allowed, min, max, help)                              \
    {#id, OFCCL__CT_##type, OFCCL__SCOPE_##scope, def, allowed, min, max, help},
    OFCCL__CONFIG_TABLE(OFCCL__X_PARAM)
#undef OFCCL__X_PARAM
};

/* Index of `word` (length n) in the '|'-separated list `allowed`, or -1. */
static int choice_index(const char *allowed, const char *word, size_t n)
{
    int idx = 0;
    const char *p = allowed;

    while (*p) {
        const char *end = strchr(p, '|');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncasecmp(p, word, n) == 0)
            return idx;
        idx++;
        if (!end)
            break;
        p = end + 1;
    }
    return -1;
}

static int count_choices(const char *allowed)
{
    int n = 1;
    for (const char *p = allowed; *p; p++)
        n += *p == '|';
    return n;
}

static int parse_bool(const char *t, int64_t *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};

    for (size_t k = 0; k < OFCCL__ARRAY_LEN(yes); k++) {
        if (strcasecmp(t, yes[k]) == 0)
            return (*out = 1), 0;
        if (strcasecmp(t, no[k]) == 0)
            return (*out = 0), 0;
    }
    return -1;
}

/* Decimal integer with an optional K/M/G (and optional trailing B/iB) suffix
 * when `with_suffix`; rejects trailing garbage and overflow. */
static int parse_int(const char *t, int with_suffix, int64_t *out)
{
    char *end;
    long long v;
    int64_t mul = 1;

    while (isspace((unsigned char)*t))
        t++;
    if (*t == '\0')
        return -1;
    errno = 0;
    v = strtoll(t, &end, 10);
    if (errno != 0 || end == t)
        return -1;
    if (with_suffix && *end) {
        switch (toupper((unsigned char)*end)) {
        case 'K':
            mul = 1ll << 10;
            break;
        case 'M':
            mul = 1ll << 20;
            break;
        case 'G':
            mul = 1ll << 30;
            break;
        default:
            return -1;
        }
        end++;
        if (toupper((unsigned char)*end) == 'I')
            end++;
        if (toupper((unsigned char)*end) == 'B')
            end++;
    }
    if (*end != '\0')
        return -1;
    if (v != 0 && (v > INT64_MAX / mul || v < INT64_MIN / mul))
        return -1;
    *out = (int64_t)v * mul;
    return 0;
}

static int parse_list(const char *allowed, const char *t, int64_t *out)
{
    int all_idx = choice_index(allowed, "all", 3);
    int64_t mask = 0;
    const char *p = t;

    if (*p == '\0')
        return -1;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        int idx = choice_index(allowed, p, n);
        if (idx < 0)
            return -1;
        mask |= idx == all_idx ? ((1ll << all_idx) - 1) : (1ll << idx);
        if (!end)
            break;
        p = end + 1;
    }
    *out = mask;
    return 0;
}

int ofccl__config_parse(int id, const char *text, ofccl__cfg_value_t *out, ofccl__err_t *e)
{
    const ofccl__cfg_param_t *p;
    int64_t v = 0;
    int bad = 0;

    if (id < 0 || id >= OFCCL__CFG_COUNT || text == NULL)
        return ofccl__fail(NULL, OFCCL__SUB_CORE, e, OFCCL_ERR_INVALID_ARG,
                           "config: no parameter #%d", id);
    p = &ofccl__cfg_params[id];
    if (strlen(text) >= sizeof(out->s))
        return ofccl__fail(NULL, OFCCL__SUB_CORE, e, OFCCL_ERR_CONFIG,
                           "OFCCL_%s: value is longer than %zu characters", p->name,
                           sizeof(out->s) - 1);
    switch (p->type) {
    case OFCCL__CT_BOOL:
        bad = parse_bool(text, &v);
        break;
    case OFCCL__CT_INT:
    case OFCCL__CT_SIZE:
        bad = parse_int(text, p->type == OFCCL__CT_SIZE, &v);
        if (!bad && (v < p->min || v > p->max))
            return ofccl__fail(NULL, OFCCL__SUB_CORE, e, OFCCL_ERR_CONFIG,
                               "OFCCL_%s=%s is out of range: allowed %lld..%lld", p->name, text,
                               (long long)p->min, (long long)p->max);
        break;
    case OFCCL__CT_ENUM:
        v = choice_index(p->allowed, text, strlen(text));
        bad = v < 0 || v >= count_choices(p->allowed);
        break;
    case OFCCL__CT_LIST:
        bad = parse_list(p->allowed, text, &v);
        break;
    case OFCCL__CT_STRING:
        break;
    }
    if (bad) {
        static const char *const what[] = {"0|1|true|false|yes|no|on|off",
                                           "an integer",
                                           "a size in bytes (K/M/G suffixes allowed)",
                                           NULL,
                                           NULL,
                                           NULL};
        const char *allowed = what[p->type] ? what[p->type] : p->allowed;
        if (p->type == OFCCL__CT_LIST)
            return ofccl__fail(NULL, OFCCL__SUB_CORE, e, OFCCL_ERR_CONFIG,
                               "OFCCL_%s=%s is invalid: allowed a comma-separated list of %s",
                               p->name, text, p->allowed);
        return ofccl__fail(NULL, OFCCL__SUB_CORE, e, OFCCL_ERR_CONFIG,
                           "OFCCL_%s=%s is invalid: allowed %s", p->name, text, allowed);
    }
    out->i = v;
    ofccl__strlcpy(out->s, text, sizeof(out->s));
    return 0;
}

static const char *env_lookup(void *arg, const char *name)
{
    (void)arg;
    return getenv(name); /* the library's only getenv() */
}

static int find_param(const char *name, size_t n)
{
    for (int id = 0; id < OFCCL__CFG_COUNT; id++)
        if (strlen(ofccl__cfg_params[id].name) == n &&
            strncasecmp(ofccl__cfg_params[id].name, name, n) == 0)
            return id;
    return -1;
}

int ofccl__config_load(ofccl__config_t *cfg, const char *const *settings,
                       ofccl__cfg_lookup_fn lookup, void *arg, ofccl__err_t *e)
{
    ofccl__config_t tmp;
    int rc;

    if (cfg == NULL)
        return ofccl__fail(NULL, OFCCL__SUB_CORE, e, OFCCL_ERR_INVALID_ARG, "config: NULL output");
    if (lookup == NULL)
        lookup = env_lookup;
    for (int id = 0; id < OFCCL__CFG_COUNT; id++) {
        char var[96];
        const char *text;

        rc = ofccl__config_parse(id, ofccl__cfg_params[id].def, &tmp.v[id], e);
        if (rc)
            return rc; /* a bad default is a bug caught by the unit tests */
        tmp.v[id].from = 0;
        snprintf(var, sizeof(var), "OFCCL_%s", ofccl__cfg_params[id].name);
        text = lookup(arg, var);
        if (text != NULL) {
            rc = ofccl__config_parse(id, text, &tmp.v[id], e);
            if (rc)
                return rc;
            tmp.v[id].from = 1;
        }
    }
    for (size_t k = 0; settings != NULL && settings[k] != NULL; k++) {
        const char *s = settings[k];
        const char *eq = strchr(s, '=');
        const char *name = s;
        int id;

        if (eq == NULL)
            return ofccl__fail(NULL, OFCCL__SUB_CORE, e, OFCCL_ERR_CONFIG,
                               "setting '%s' is not of the form NAME=value", s);
        if (strncasecmp(name, "OFCCL_", 6) == 0)
            name += 6;
        id = find_param(name, (size_t)(eq - name));
        if (id < 0)
            return ofccl__fail(NULL, OFCCL__SUB_CORE, e, OFCCL_ERR_CONFIG,
                               "setting '%s' names no parameter (see `ofccl_info -c`)", s);
        rc = ofccl__config_parse(id, eq + 1, &tmp.v[id], e);
        if (rc)
            return rc;
        tmp.v[id].from = 2;
    }
    *cfg = tmp;
    return 0;
}

static void append_name(char *buf, size_t len, const char *name, size_t n)
{
    size_t used = strlen(buf);

    if (used + n + 2 >= len)
        return;
    if (used > 0)
        buf[used++] = ',';
    memcpy(buf + used, name, n);
    buf[used + n] = '\0';
}

void ofccl__config_unknown_env(char *buf, size_t len)
{
    if (len == 0)
        return;
    buf[0] = '\0';
    for (char **ep = environ; ep != NULL && *ep != NULL; ep++) {
        const char *eq = strchr(*ep, '=');
        /* OFCCL_TEST_*: the test suite's own switches, never parameters */
        if (strncmp(*ep, "OFCCL_", 6) != 0 || eq == NULL || strncmp(*ep, "OFCCL_TEST_", 11) == 0)
            continue;
        if (find_param(*ep + 6, (size_t)(eq - *ep - 6)) < 0)
            append_name(buf, len, *ep, (size_t)(eq - *ep));
    }
}

void ofccl__config_launcher_env(char *buf, size_t len)
{
    /* The most telling prefixes first: srun sets some 40 SLURM_* variables,
     * which alone overflow the buffer, and the diagnosis of a broken launch
     * rests on whether a PMIX_, OMPI_ or PMI_ name made it into the list. */
    static const char *const prefixes[] = {"PMIX_", "OMPI_", "PMI_", "SLURM_"};

    if (len == 0)
        return;
    buf[0] = '\0';
    for (size_t k = 0; k < OFCCL__ARRAY_LEN(prefixes); k++) {
        for (char **ep = environ; ep != NULL && *ep != NULL; ep++) {
            const char *eq = strchr(*ep, '=');
            /* OMPI_ALLOW_RUN_AS_ROOT*, OMPI_MCA_* and SLURM_CONF (which cluster
             * a Slurm command talks to) are user settings, not a launch. */
            if (eq == NULL || strncmp(*ep, "OMPI_ALLOW_RUN_AS_ROOT", 22) == 0 ||
                strncmp(*ep, "OMPI_MCA_", 9) == 0 || strncmp(*ep, "SLURM_CONF=", 11) == 0)
                continue;
            if (strncmp(*ep, prefixes[k], strlen(prefixes[k])) == 0)
                append_name(buf, len, *ep, (size_t)(eq - *ep));
        }
    }
}

void ofccl__config_format(int id, int64_t v, char *buf, size_t len)
{
    const ofccl__cfg_param_t *p = &ofccl__cfg_params[id];

    if (p->type == OFCCL__CT_ENUM) {
        const char *w = p->allowed;
        for (int64_t k = 0; k < v && w != NULL; k++)
            if ((w = strchr(w, '|')) != NULL)
                w++;
        if (w != NULL && v >= 0) {
            size_t n = strcspn(w, "|");
            snprintf(buf, len, "%.*s", (int)n, w);
            return;
        }
    }
    snprintf(buf, len, "%lld", (long long)v);
}
