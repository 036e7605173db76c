/* Fuzz target: configuration parsing. Input: 1 byte picks a parameter, the
 * rest is its text; the same text is also fed as a list of NAME=value settings. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

static const char *no_env(void *arg, const char *name)
{
    (void)arg;
    (void)name;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[512], *lines[16], *save = NULL;
    const char *settings[17];
    ofccl__cfg_value_t v;
    ofccl__config_t cfg;
    ofccl__err_t e;
    int n = 0;

    if (size < 1 || size > sizeof(text))
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    if (ofccl__config_parse(data[0] % OFCCL__CFG_COUNT, text, &v, &e) == 0 &&
        strlen(v.s) != strlen(text))
        __builtin_trap(); /* accepted text is kept verbatim */
    for (char *tok = strtok_r(text, "\n", &save); tok != NULL && n < 16;
         tok = strtok_r(NULL, "\n", &save))
        lines[n++] = tok;
    for (int k = 0; k < n; k++)
        settings[k] = lines[k];
    settings[n] = NULL;
    ofccl__config_load(&cfg, settings, no_env, NULL, &e);
    return 0;
}
