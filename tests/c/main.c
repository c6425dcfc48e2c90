/* A command around the C client (client.c), for a C build that links the installed
 * shim through pkg-config (ci/c-pkg-config.sh): `client REGION READY COUNT` creates the
 * region, touches READY, waits for a prescient-dpu to serve it, PUTs COUNT values and
 * GETs the first back. Exits 0, or 1 naming the failed check's line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int prescient_c_client_run(const char *region_path, const char *ready_path, uint32_t count);

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s REGION READY COUNT\n", argv[0]);
        return 2;
    }
    int rc = prescient_c_client_run(argv[1], argv[2], (uint32_t)strtoul(argv[3], NULL, 10));
    if (rc != 0) {
        fprintf(stderr, "c client: failed at line %d of client.c\n", -rc);
        return 1;
    }
    printf("c client: ok\n");
    return 0;
}
