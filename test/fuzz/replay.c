/* Regression replay of a fuzz corpus without libFuzzer: feed every file of the
 * given directories to the target once. Built with any compiler, run by
 * `meson test`, so CI re-checks every input the fuzzers ever kept. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    unsigned replayed = 0;

    for (int a = 1; a < argc; a++) {
        DIR *dir = opendir(argv[a]);
        struct dirent *de;
        if (dir == NULL) {
            fprintf(stderr, "replay: cannot open %s\n", argv[a]);
            return 1;
        }
        while ((de = readdir(dir)) != NULL) {
            char path[4096];
            uint8_t buf[1 << 16];
            size_t n;
            FILE *f;
            if (de->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", argv[a], de->d_name);
            if ((f = fopen(path, "rb")) == NULL)
                continue;
            n = fread(buf, 1, sizeof(buf), f);
            fclose(f);
            LLVMFuzzerTestOneInput(buf, n);
            replayed++;
        }
        closedir(dir);
    }
    printf("%u inputs replayed\n%u passed, 0 failed\n", replayed, replayed);
    return replayed == 0; /* an empty corpus is a broken test, not a pass */
}
