/* A C key-value store's view of Prescient: the smallest real client of the C ABI.
 *
 * prescient_c_client_run() attaches nothing it does not create: it creates a region,
 * waits for a prescient-dpu process (started by the Rust test) to serve it, then
 * writes `count` values straight into arena buffers and submits them as PUTs, and
 * checks every completion. It also checks that the shim refuses a doubly submitted
 * buffer and a buffer freed while in flight, reads the fresh region's cache directory
 * (every slot valid, but no lease, so nothing may be served), and GETs the first key
 * back: the value it PUT comes back in the GET's buffer. Returns 0 on success, or a
 * negative line number of the first failed check. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "prescient.h"

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "c client: check failed at line %d: %s (last error: %s)\n",   \
                    __LINE__, #cond, prescient_last_error());                              \
            return -__LINE__;                                                              \
        }                                                                                  \
    } while (0)

/* Completions seen per user_data, to prove each arrives exactly once. */
static uint8_t seen[4096];

int prescient_c_client_run(const char *region_path, const char *ready_path, uint32_t count) {
    PrescientRegionConfig config = {
        .queue_pairs = 1, .ring_entries = 64, .host_buffers = 128,
        .dpu_buffers = 8, .buffer_bytes = 4096, .directory_slots = 1024,
    };
    PrescientHost *host = NULL;
    PrescientQp *qp = NULL;
    CHECK(count <= sizeof seen);
    CHECK(prescient_host_create(region_path, &config, 0, &host) == PRESCIENT_RC_OK);
    CHECK(prescient_qp_open(host, 0, &qp) == PRESCIENT_RC_OK);

    /* A fresh directory: all-zero words, which are valid; but no DPU app has granted a
     * lease, so the cache may not be used. */
    const uint8_t *dkey = (const uint8_t *)"c-key-0";
    PrescientSlotWord word;
    CHECK(prescient_slot_state(host, dkey, 7, &word) == PRESCIENT_RC_OK);
    CHECK(word.packed == 0 && word.state == PRESCIENT_SLOT_STATE_VALID && word.version == 0 && word.writer == 0);
    PrescientReadCheck check;
    CHECK(prescient_check_read(host, dkey, 7, prescient_monotonic_ns(), &check) == PRESCIENT_RC_OK);
    CHECK(check.decision == PRESCIENT_READ_DECISION_NO_LEASE);
    CHECK(prescient_refill(host, &check.token) == PRESCIENT_RC_SLOT_CHANGED);
    /* Tell the test the region exists, so it can start prescient-dpu on it. */
    FILE *ready = fopen(ready_path, "w");
    CHECK(ready != NULL);
    fclose(ready);

    uint32_t submitted = 0, completed = 0, ok = 0, retries = 0;
    PrescientCompletion done[16];
    while (completed < count) {
        while (submitted < count) {
            PrescientBuffer buf;
            PrescientRc rc = prescient_buffer_take(host, &buf);
            if (rc == PRESCIENT_RC_ARENA_EXHAUSTED) break;
            CHECK(rc == PRESCIENT_RC_OK);
            char key[32];
            int key_len = snprintf(key, sizeof key, "c-key-%u", submitted);
            int value_len = snprintf((char *)buf.value, buf.capacity, "value %u from C", submitted);
            rc = prescient_put(qp, (const uint8_t *)key, (size_t)key_len, &buf, (size_t)value_len, submitted);
            if (rc == PRESCIENT_RC_RING_FULL) {
                CHECK(prescient_buffer_free(host, &buf) == PRESCIENT_RC_OK);
                break;
            }
            if (rc == PRESCIENT_RC_DPU_NOT_RESPONDING) {
                /* The DPU app may still be starting: keep the buffer and retry. */
                CHECK(prescient_buffer_free(host, &buf) == PRESCIENT_RC_OK);
                CHECK(++retries < 3000); /* 30 s at most */
                nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 10000000}, NULL);
                break;
            }
            CHECK(rc == PRESCIENT_RC_OK);
            if (submitted == 0) {
                /* The same buffer again: the shim refuses it, and refuses to free it. */
                CHECK(prescient_put(qp, (const uint8_t *)key, (size_t)key_len, &buf, 1, 9999) == PRESCIENT_RC_BUFFER_STATE);
                CHECK(prescient_buffer_free(host, &buf) == PRESCIENT_RC_BUFFER_STATE);
            }
            submitted++;
        }
        if (submitted == completed) continue; /* nothing in flight to wait for */
        size_t got = 0;
        PrescientRc rc = prescient_wait(qp, 2000, done, 16, &got);
        if (rc == PRESCIENT_RC_DPU_NOT_RESPONDING && completed == 0) {
            CHECK(++retries < 3000);
            continue;
        }
        CHECK(rc == PRESCIENT_RC_OK);
        for (size_t i = 0; i < got; i++) {
            CHECK(done[i].user_data < count);
            CHECK(seen[done[i].user_data] == 0);
            seen[done[i].user_data] = 1;
            CHECK(done[i].op == 1);
            if (done[i].status == 0) ok++;
            completed++;
        }
    }
    CHECK(ok == count);

    /* One GET: the buffer carries the key and comes back with the completion. */
    PrescientBuffer get_buf;
    CHECK(prescient_buffer_take(host, &get_buf) == PRESCIENT_RC_OK);
    CHECK(prescient_get(qp, dkey, 7, &get_buf, /*stale*/ 0, /*max_wait_us*/ 0, 7777) == PRESCIENT_RC_OK);
    /* No prescient_buffer_free check here: the DPU app may have completed the GET and
     * handed the buffer back (Host) before the next line runs, and then freeing it is
     * allowed; the PUT above checks that a submitted buffer cannot be freed. */
    size_t got = 0;
    CHECK(prescient_wait(qp, 10000, done, 16, &got) == PRESCIENT_RC_OK);
    CHECK(got == 1 && done[0].user_data == 7777 && done[0].op == 3);
    CHECK(done[0].status == 0); /* ok: the value PUT first */
    static const char first[] = "value 0 from C";
    CHECK(done[0].detail == sizeof first - 1);
    PrescientBuffer back;
    CHECK(prescient_take_value(qp, &done[0], &back) == PRESCIENT_RC_OK);
    CHECK(back.index == get_buf.index && back.generation == get_buf.generation);
    CHECK(memcmp(back.value, first, sizeof first - 1) == 0);
    CHECK(prescient_take_value(qp, &done[0], &back) == PRESCIENT_RC_NO_VALUE);
    CHECK(prescient_buffer_free(host, &back) == PRESCIENT_RC_OK);

    /* A batch: four PUTs queued with prescient_push_put, published by one flush. */
    enum { BATCH = 4 };
    for (uint32_t i = 0; i < BATCH; i++) {
        PrescientBuffer b;
        CHECK(prescient_buffer_take(host, &b) == PRESCIENT_RC_OK);
        char key[16];
        int key_len = snprintf(key, sizeof key, "batch-%u", i);
        memcpy(b.value, "batched", 7);
        CHECK(prescient_push_put(qp, (const uint8_t *)key, (size_t)key_len, &b, 7, 8000 + i) == PRESCIENT_RC_OK);
    }
    CHECK(prescient_flush(qp) == PRESCIENT_RC_OK);
    for (size_t have = 0; have < BATCH;) {
        CHECK(prescient_wait(qp, 10000, done, 16, &got) == PRESCIENT_RC_OK);
        for (size_t i = 0; i < got; i++) {
            CHECK(done[i].user_data >= 8000 && done[i].user_data < 8000 + BATCH && done[i].op == 1 && done[i].status == 0);
        }
        have += got;
    }

    /* DELETE batch-0, then a GET of it finds nothing (status 11, not found). */
    PrescientBuffer del_buf;
    CHECK(prescient_buffer_take(host, &del_buf) == PRESCIENT_RC_OK);
    CHECK(prescient_delete(qp, (const uint8_t *)"batch-0", 7, &del_buf, 8100) == PRESCIENT_RC_OK);
    CHECK(prescient_wait(qp, 10000, done, 16, &got) == PRESCIENT_RC_OK);
    CHECK(got == 1 && done[0].user_data == 8100 && done[0].op == 2 && done[0].status == 0);
    CHECK(prescient_buffer_take(host, &get_buf) == PRESCIENT_RC_OK);
    /* A stale read that names a wait is refused, and the buffer stays the caller's. */
    CHECK(prescient_get(qp, (const uint8_t *)"batch-0", 7, &get_buf, /*stale*/ 0, 5, 8101) == PRESCIENT_RC_INVALID);
    CHECK(prescient_get(qp, (const uint8_t *)"batch-0", 7, &get_buf, /*fresh*/ 1, /*max_wait_us*/ 2000, 8101) == PRESCIENT_RC_OK);
    CHECK(prescient_wait(qp, 10000, done, 16, &got) == PRESCIENT_RC_OK);
    CHECK(got == 1 && done[0].user_data == 8101 && done[0].status == 11);
    CHECK(prescient_take_value(qp, &done[0], &back) == PRESCIENT_RC_OK);
    CHECK(prescient_buffer_free(host, &back) == PRESCIENT_RC_OK);

    prescient_qp_close(qp);
    prescient_host_free(host);
    return 0;
}
